"""python -m experiments.routing_test: the cross-position routing hypothesis, tested end to end.

Rooms: run.py (options, plan, analyse), rules.py (the predictions P1-P7 and places), report.py (table, summary,
report.html). `python -m experiments.routing_test` runs it (__main__.py).
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # `from experiments.routing_test import X`, the old one-module path (PEP 562)
    return getattr(importlib.import_module(f"{__name__}.run"), name)
