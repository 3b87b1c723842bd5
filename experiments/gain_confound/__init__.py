"""python -m experiments.gain_confound: the paper's section 5.1 - a gain on the sublayer outputs, two ways.

Rooms: run.py, adam_invariance.py (the derivation its report prints). `python -m experiments.gain_confound` runs it
(__main__.py).
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # `from experiments.gain_confound import X`, the old one-module path (PEP 562)
    return getattr(importlib.import_module(f"{__name__}.run"), name)
