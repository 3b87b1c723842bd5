"""python -m experiments.phase_diagram: where ffn_only's collapse holds, over depth, lr, width and self-bias.

Rooms: run.py (options, plan, confirm rounds, analyse), grid.py (cells and slices), boundary.py (places and
sentences), collapse_predictor.py (early predictors), report.py. `python -m experiments.phase_diagram` runs it
(__main__.py).
"""
