"""python -m experiments.floor: what the ffn_only floor is - token uniformity from initialisation to escape.

Rooms: run.py (plan, analysis, predictions written before the knob trains), arms.py (options, the cells),
knob.py (the query/key initial scale), init_measure.py (the model a run starts from, measured),
signal_table.py (collapse at initialisation over depth, width and context), relation.py (collapse -> wait,
predictions and their check), plateau.py (waiting on the floor against descending through it), report.py.
"""
