"""The statistics experiments share: intervals and tests (stats.py), the held-out one-feature predictor.

stats.py       seeds, curves, paired runs, the 3x projection
held_out.py    a one-feature threshold classifier held out, AUC and exact intervals
"""
