"""`python -m experiments.gain_confound`: runs the experiment declared in experiments/gain_confound/run.py."""

from experiments.gain_confound.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
