"""`python -m experiments.interventions`: runs the experiment declared in experiments/interventions/run.py."""

from experiments.interventions.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
