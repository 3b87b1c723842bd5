"""`python -m experiments.phase_diagram`: runs the experiment declared in experiments/phase_diagram/run.py."""

from experiments.phase_diagram.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
