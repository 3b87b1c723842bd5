"""python -m experiments.eval_noise: how much random validation batches move "val loss" and "best val".

Rooms: run.py (options, plan, analyse, report), snapshots.py (the weight snapshots and their seal).
`python -m experiments.eval_noise` runs it (__main__.py).
"""
