"""python -m experiments.routing_test: the cross-position routing hypothesis, tested end to end.

Rooms: run.py (options, plan, analyse), rules.py (the predictions P1-P7 and places), report.py (table, summary,
report.html). `python -m experiments.routing_test` runs it (__main__.py).
"""
