"""Plateau, not only escape: the time a run's loss spends on the floor, told apart from a descent through it.

Fixed before any run was read (issue 44, part 3). At margin m, the band is [unigram - m, unigram + m]:

    plateau time   the number of evaluations whose validation loss lies inside the band, times the evaluation
                   interval (steps on the floor, wherever in the run)
    longest        the longest run of consecutive evaluations inside the band, in steps
    waits          longest >= WAIT_EVALS evaluation intervals: the run sat on the floor, it did not only pass
                   through the unigram level on its way down
    a cell waits   when at least half its runs wait; otherwise it "descends through"

Read at the escape rule's three margins (m/2, m, 2m).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WAIT_EVALS = 4


def plateau(losses: Sequence[float], unigram: float, margin: float, every: int) -> dict[str, Any]:
    inside = [abs(x - unigram) <= margin for x in losses]  # a non-finite loss is never inside
    longest = run = 0
    for flag in inside:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return {"time": sum(inside) * every, "longest": longest * every, "waits": longest >= WAIT_EVALS}


def cell_plateau(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Over one cell's runs at one margin (key): median plateau time, how many wait, the cell's word."""
    import numpy as np

    items = [r["plateau"][key] for r in runs]
    waits = sum(p["waits"] for p in items)
    return {
        "n": len(items),
        "n_waits": waits,
        "median_time": float(np.median([p["time"] for p in items])),
        "median_longest": float(np.median([p["longest"] for p in items])),
        "word": "waits" if 2 * waits >= len(items) else "descends through",
    }
