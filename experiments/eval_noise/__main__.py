from experiments.eval_noise.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
