"""What every experiment shares: the frame (frame.py: options, runs, results.json, report), launching (launch.py:
local, ensembles, submitit/Slurm), option checks (options.py), plans (plan.py), seed and curve statistics (stats.py)
and table text (text.py).
"""
