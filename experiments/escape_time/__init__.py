"""python -m experiments.escape_time: how long ffn_only waits on the floor, and what changes when it leaves.

Rooms: run.py (plan, analyse, preface), escape_grid.py (options, their checks, the cells), survival.py (escape
steps, Kaplan-Meier, the fitted law), mechanism.py (the escape probe and the curves aligned on escape),
escape_predictor.py (early predictors held out by seed), report.py. `python -m experiments.escape_time` runs it
(__main__.py).
"""
