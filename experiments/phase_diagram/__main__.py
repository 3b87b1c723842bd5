from experiments.phase_diagram.run import EXPERIMENT

raise SystemExit(EXPERIMENT.main())
