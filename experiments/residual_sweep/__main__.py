"""`python -m experiments.residual_sweep`: runs the experiment declared in experiments/residual_sweep/run.py."""

from experiments.residual_sweep.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
