"""python -m experiments.interventions: causal interventions inside the routing test's trained models.

Rooms: run.py (options, plan, analyse), effects.py (the interventions on one model), rules.py (verdicts), report.py.
`python -m experiments.interventions` runs it (__main__.py).
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # `from experiments.interventions import X`, the old one-module path (PEP 562)
    return getattr(importlib.import_module(f"{__name__}.run"), name)
