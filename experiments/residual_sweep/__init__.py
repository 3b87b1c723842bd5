"""python -m experiments.residual_sweep: the paper's residual tables - four residual configs x seeds.

Rooms: run.py. `python -m experiments.residual_sweep` runs it (__main__.py).
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # `from experiments.residual_sweep import X`, the old one-module path (PEP 562)
    return getattr(importlib.import_module(f"{__name__}.run"), name)
