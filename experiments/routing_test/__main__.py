"""`python -m experiments.routing_test`: runs the experiment declared in experiments/routing_test/run.py."""

from experiments.routing_test.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
