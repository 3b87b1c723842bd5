"""python -m experiments.eval_noise: how much random validation batches move "val loss" and "best val".

Rooms: run.py (options, plan, analyse, report), snapshots.py (the weight snapshots and their seal).
`python -m experiments.eval_noise` runs it (__main__.py).
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # `from experiments.eval_noise import X`, the old one-module path (PEP 562)
    return getattr(importlib.import_module(f"{__name__}.run"), name)
