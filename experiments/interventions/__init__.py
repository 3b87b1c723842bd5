"""python -m experiments.interventions: causal interventions inside the routing test's trained models.

Rooms: run.py (options, plan, analyse), effects.py (the interventions on one model), rules.py (verdicts), report.py.
`python -m experiments.interventions` runs it (__main__.py).
"""
