"""python -m experiments.residual_sweep: the paper's residual tables - four residual configs x seeds.

Rooms: run.py. `python -m experiments.residual_sweep` runs it (__main__.py).
"""
