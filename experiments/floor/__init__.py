"""python -m experiments.floor: what the ffn_only floor is - token uniformity from initialisation to escape.

Rooms: run.py (plan, analysis, predictions written before the knob trains), arms.py (options, the cells),
knob.py (the query/key initial scale), init_measure.py (the model a run starts from, measured),
signal_table.py (collapse at initialisation over depth, width and context), relation.py (collapse -> wait,
predictions and their check), predictions.py (the knob's predictions, written before its arms train), per_run.py
(one run read from its logs), plateau.py (waiting on the floor against descending through it), deep.py (the
deep part: paper-124m's depth in miniature), law.py and law_predictions.py (the wait as a law in collapse and
depth, and its held-out predictions: not yet a part of the command, issue 59), paper_scale.py (the paper-scale
prediction files gpu-check scores), report.py.
"""
