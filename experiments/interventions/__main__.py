from experiments.interventions.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
