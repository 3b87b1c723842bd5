from experiments.escape_time.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
