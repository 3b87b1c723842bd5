"""Questions answered end to end, one package each (python -m experiments lists them); below them
shared/ (the ground: plans, options, places), statistics/, cluster/, shipping/ and runner/.

    <name>/        one experiment: run.py its Experiment (options, plan, analyse), __main__.py
                   (python -m experiments.<name>), report.py its table, summary and figures,
                   rules.py its predictions where it has any, and rooms of its own:
    routing_test/    rules.py P1-P7 and places; report.py
    interventions/   effects.py what it measures per model (bootstrap, patching, sanity checks,
                   export difference); rules.py I1-I8; report.py
    phase_diagram/   grid.py axes, cells, slices, FLOP estimate; boundary.py places, --confirm cells,
                   sentences; collapse_predictor.py early features, their callback, the held-out test; report.py
    escape_time/     escape_grid.py options and cells; survival.py escape steps, Kaplan-Meier, the
                   fitted law; mechanism.py the probe taken through training and the curves aligned on escape;
                   escape_predictor.py early predictors held out by seed; report.py
    floor/           arms.py options and cells; knob.py the query/key initial scale; init_measure.py the
                   model a run starts from, measured; signal_table.py collapse at init over depth, width,
                   context, dose; relation.py collapse -> wait, predictions and their check; predictions.py
                   predictions-floor.json written before the knob trains; per_run.py escape, plateau,
                   series; plateau.py the plateau rule; deep.py the 12-layer part; law.py and
                   law_predictions.py the wait as a law and its held-out predictions; paper_scale.py the
                   paper-scale predictions gpu-check scores; report.py
    residual_sweep/  run.py only
    eval_noise/      snapshots.py the weight snapshots (steps, the callback, the sealed read-back)
    gain_confound/   adam_invariance.py the proof it prints
"""

from interp.command.entry import refuse_library_module
from interp.command.signals import guard_startup

guard_startup()  # a Ctrl-C while modules import: one line, not a traceback
refuse_library_module(__file__)  # python -m <a module that does not run>: one line, exit 2
