"""How a re-analysis of a shipped folder is compared with the results file it ships (tests/test_shipped.py).

Exactly, except where a computation rounds differently on another CPU. Measured (issue 58 item 4) by
re-analysing every folder under docs/results/data on an AVX2 host under ATEN_CPU_CAPABILITY=default and =avx2,
1 and 2 threads, against the files another host shipped: counts, steps, words, the numbers read from the logs
and the arithmetic on them (Kaplan-Meier curves and bands, exact and t intervals, the seeded bootstraps of
logged values, the routing test's whole analysis) came out bit for bit; two computations did not:

  fits       the censored log-normal maximum likelihood (experiments.escape_time.survival.fit_lognormal:
             escape_time's law, floor's relation, their bootstrap refits) and what is read off it. L-BFGS-B stops
             where the likelihood's relative change falls under ftol 1e-15; near a maximum the likelihood is flat
             to second order, so its stopping point is fixed to about sqrt(2 ftol max(|nll|, 1) / curvature):
             3e-8 on escape_time-smoke's laws (nll 0.3-2.8, smallest curvature 6). The covariance is a
             finite-difference Hessian (scipy.differentiate, rtol sqrt(eps) = 1.5e-8 of each entry), inverted.
             Numpy's BLAS (OpenBLAS, its kernel picked per CPU) rounds the least-squares start and the matrix
             products differently on each CPU: the shipped law differs from this host's by 3e-9 (params), 1e-8
             (se, the covariance's diagonal) and 2.7e-7 relative (1.1e-9 absolute) on an off-diagonal entry 30x
             smaller than its row; OPENBLAS_CORETYPE=Prescott moves this host's params by 1.3e-9, and a start
             moved by 4e-16 (six tries) moves the laws and predictions by as much as the shipped host's do, no
             more. Held at 1e-6 relative, 1e-8 absolute for entries near zero.
  init       floor's initialisation table (experiments.floor.signal_table): float64 forward passes of freshly
             initialised float32 models. The initialising kernels ATEN_CPU_CAPABILITY picks round the weights a
             few float32 ulps apart; default against avx2 moved each value up to 6.5e-7 of its cell's scale (4
             cells, the two most collapsed among them); an interval's ends over n seeds move up to 1 + t(n - 1)
             times a seed's move (13.7 at smoke's 2 seeds). Held at 1e-4 of the cell's scale (the largest of its
             mean and ends, or of its per-seed values), 10x under the last digit the report prints (3 decimals).
             Until the floor folders were shipped again (2026-12-06) the forward ran in float32: near total
             collapse its rounding moved the effective rank by up to 2.3e-3 between hosts (docs/results/floor.md).
  init_check_max_diff   the largest |u| between the logged step-0 probe and the same model rebuilt here: float32
             rounding itself (0.0 shipped; 8.3e-8 here under default, 1.5e-8 under avx2). Held within 1e-5.

A digit the console or the report prints is compared as printed (printed(), beside the numbers): a value within
its tolerance that rounds the other way at the printed digit fails, never flips a published number silently.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    rel: float
    abs: float = 0.0
    # rel is taken of the largest number beside the value (its dict's or list's): an interval's end near zero
    # moves as much as the interval's other numbers do
    of_siblings: bool = False


FIT = Tolerance(rel=1e-6, abs=1e-8)
INIT = Tolerance(rel=1e-4, of_siblings=True)
# Paths as differences() names them (list items /0, /1, ...), fnmatch patterns. Not listed: exact.
TOLERANCES: dict[str, dict[str, Tolerance]] = {
    "escape_time": {"/law/*": FIT, "/holdout/*/predicted/*": FIT},
    "floor": {
        "/relation/*": FIT,
        "*/prediction/median_wait": FIT,  # the relation's median for an arm's u, and its floor at the last step
        "*/prediction/floor_at_last": FIT,
        "/init/cells/*": INIT,
        "/init/rates/*": INIT,
        "/init_check_max_diff": Tolerance(rel=0.0, abs=1e-5),
    },
}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scale(items) -> float:
    return max((abs(v) for v in items if _number(v) and math.isfinite(v)), default=0.0)


def differences(
    shipped: Any, recomputed: Any, tolerances: dict[str, Tolerance], path: str = "", scale: float = 0.0
) -> list[str]:
    """Where a recomputed result differs from the shipped one: exactly, but for a float where `tolerances`
    names its path (an int is a count or a step, and equal)."""
    if isinstance(shipped, dict) and isinstance(recomputed, dict):
        keys = sorted(set(shipped) | set(recomputed))
        s = _scale(shipped.values())
        pairs = [(k, shipped.get(k, "<absent>"), recomputed.get(k, "<absent>")) for k in keys]
        return [d for k, a, b in pairs for d in differences(a, b, tolerances, f"{path}/{k}", s)]
    if isinstance(shipped, list) and isinstance(recomputed, list):
        if len(shipped) != len(recomputed):
            return [f"{path}: {len(shipped)} items shipped, {len(recomputed)} recomputed"]
        s = _scale(shipped)
        return [
            d
            for i, (a, b) in enumerate(zip(shipped, recomputed, strict=True))
            for d in differences(a, b, tolerances, f"{path}/{i}", s)
        ]
    if type(shipped) is type(recomputed) and shipped == recomputed:
        return []
    tol = next((t for pattern, t in tolerances.items() if fnmatch.fnmatchcase(path, pattern)), None)
    if tol and isinstance(shipped, float) and isinstance(recomputed, float) and within(shipped, recomputed, tol, scale):
        return []
    return [f"{path}: shipped {shipped!r:.80}, recomputed {recomputed!r:.80}"]


def within(a: float, b: float, tol: Tolerance, scale: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return False  # an infinity or NaN is equal (above) or differs
    size = max(abs(a), abs(b), scale if tol.of_siblings else 0.0)
    return abs(a - b) <= tol.rel * size + tol.abs


def printed(experiment, results: dict[str, Any]) -> list[str]:
    """What a user reads of a results file: the console's table and summary, and the report's tables that are
    functions of the results alone (floor's initialisation table)."""
    from experiments.runner.text import format_table

    text = format_table(*experiment.table(results))
    if experiment.summary:
        text += "\n" + experiment.summary(results)
    if experiment.name == "floor":
        from experiments.floor.report import init_rows

        text += "\n" + format_table(*init_rows(results))
    return text.splitlines()
