from experiments.gain_confound.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
