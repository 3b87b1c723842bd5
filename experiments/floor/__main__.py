"""`python -m experiments.floor`: runs the experiment declared in experiments/floor/run.py."""

from experiments.floor.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
