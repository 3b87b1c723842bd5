"""`python -m experiments.eval_noise`: runs the experiment declared in experiments/eval_noise/run.py."""

from experiments.eval_noise.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
