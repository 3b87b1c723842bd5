"""python -m experiments.escape_time: how long ffn_only waits on the floor, and what changes when it leaves.

Rooms: run.py (options, plan, analyse), survival.py (escape steps, Kaplan-Meier, the fitted law),
mechanism.py (the escape probe and the curves aligned on escape), escape_predictor.py (early predictors held out
by seed), report.py. `python -m experiments.escape_time` runs it (__main__.py).
"""
