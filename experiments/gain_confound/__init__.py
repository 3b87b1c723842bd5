"""python -m experiments.gain_confound: the paper's section 5.1 - a gain on the sublayer outputs, two ways.

Rooms: run.py, adam_invariance.py (the derivation its report prints). `python -m experiments.gain_confound` runs it
(__main__.py).
"""
