from experiments.residual_sweep.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
