"""`python -m experiments.escape_time`: runs the experiment declared in experiments/escape_time/run.py."""

from experiments.escape_time.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
