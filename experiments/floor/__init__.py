"""python -m experiments.floor: what the ffn_only floor is - token uniformity from initialisation to escape.

Rooms: run.py (plan, analysis, predictions written before the knob trains), arms.py (options, the cells),
knob.py (the query/key initial scale), init_measure.py (the model a run starts from, measured),
signal_table.py (collapse at initialisation over depth, width and context), relation.py (collapse -> wait,
predictions and their check), predictions.py (the knob's predictions, written before its arms train), per_run.py
(one run read from its logs), plateau.py (waiting on the floor against descending through it), deep.py (the
deep part: paper-124m's depth in miniature), law.py (the wait as a law in collapse and depth), law_predictions.py
(its held-out predictions, written before those arms train, and the law part's plan), law_part.py (the law's
reading of a command's runs: the fit, each held-out arm against its prediction), paper_scale.py (the paper-scale
prediction files gpu-check scores), report.py.
"""
