from experiments.routing_test.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
