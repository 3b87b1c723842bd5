"""The ground every package of experiments/ stands on: plans (plan.py: Variant, Group, Job, Context), option
checks and the command list (options.py), a loss's place among the reference levels (places.py),
a prediction as stated before the runs (stated.py)."""
