from experiments.floor.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
