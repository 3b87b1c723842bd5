"""One relation between collapse at initialisation and the wait on the floor, and what it predicts.

relation    log T = a + b * u + sigma * N(0, 1), T a run's escape step, u = -log(residual) of its own model
            at step 0 (experiments.floor.init_measure); runs still on the floor at their last step are
            censored there (experiments.escape_time.survival.fit_lognormal, scipy). Fitted on the control
            runs; intervals from refits on runs resampled with replacement (BOOTSTRAP, seed SEED).
prediction  for an arm with its runs' u_1..u_n (measured before it trains) and its last step L: the median
            escape step and the fraction still on the floor at L, each with a predictive interval - for
            every refit, n runs are drawn from the relation at those u (escape steps rounded up to the
            evaluation grid, censored at L) and read as the observed arm is read (the ceil(n/2)-th escape
            step; the fraction with none); the interval holds the middle 95% of those draws.
held        the observed median (or "past L") and the observed fraction on the floor both fall inside their
            predictive intervals. A prediction whose interval is too wide to fail says so ("uninformative":
            it spans from the first evaluation to past L).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from experiments.escape_time.survival import fit_lognormal, refit_draws
from experiments.floor.law import draw_interval, past_as_none, percentile_interval, read_arm

BOOTSTRAP = 400
SEED = 11
PAST = math.inf  # a median past the last step


def _design(us) -> np.ndarray:
    u = np.asarray(us, dtype=float)
    return np.stack([np.ones_like(u), u], axis=1)


def _arrays(runs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = np.array([r["u"] for r in runs], dtype=float)
    times = np.array([r["escape"] if r["escape"] is not None else r["last_step"] for r in runs], dtype=float)
    escaped = np.array([r["escape"] is not None for r in runs], dtype=bool)
    return u, times, escaped


def fit_relation(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """{fitted, a, b, sigma (each {value, lower, upper}), n_runs, n_escaped, draws (refit parameters)}."""
    u, times, escaped = _arrays(runs)
    out: dict[str, Any] = {"n_runs": len(runs), "n_escaped": int(escaped.sum()), "fitted": False}
    if len(runs) < 4 or np.ptp(u) == 0:
        out["why"] = f"{len(runs)} control run(s) with {'one' if len(runs) and np.ptp(u) == 0 else 'too few'} u"
        return out
    params = fit_lognormal(_design(u), times, escaped)
    if params is None:
        out["why"] = f"no finite fit ({out['n_escaped']} escape(s) among {len(runs)} runs; at least 3 needed)"
        return out
    draws = refit_draws(
        lambda k: fit_lognormal(_design(u[k]), times[k], escaped[k]) if np.ptp(u[k]) > 0 else None,
        lambda rng: rng.integers(0, len(runs), len(runs)),
        SEED,
        BOOTSTRAP,
    )
    d = np.array(draws) if draws else params[None]
    values = {"a": params[0], "b": params[1], "sigma": math.exp(params[2])}
    columns = {"a": d[:, 0], "b": d[:, 1], "sigma": np.exp(d[:, 2])}
    for k, v in values.items():
        out[k] = percentile_interval(v, columns[k])
    out.update(fitted=True, n_refits=len(draws), params=params.tolist(), draws=d.tolist())
    return out


def predict(relation: dict[str, Any], us: list[float], last: int, every: int) -> dict[str, Any]:
    """The module docstring's prediction for an arm whose runs start at collapse `us` and stop at `last`."""
    if not relation.get("fitted"):
        return {"predicted": False, "why": relation.get("why", "no relation")}
    rng = np.random.default_rng(SEED + 1)
    draws = np.array(relation["draws"])
    x = _design(us)
    mu = draws[:, :2] @ x.T  # [draws, runs]
    sigma = np.exp(draws[:, 2])[:, None]
    t = np.exp(mu + sigma * rng.standard_normal(mu.shape))
    steps = np.maximum(every, np.ceil(t / every) * every)
    medians, floors = read_arm(steps, last)
    p = np.array(relation["params"])
    point_t = np.exp(x @ p[:2])  # each run's own median wait
    point_median = float(np.median(point_t))
    # the draws are counts and grid steps: the interval's ends are draws, not interpolations between them
    (lo_m, hi_m), (lo_f, hi_f) = draw_interval(medians), draw_interval(floors)
    from scipy import stats

    z = (math.log(last) - x @ p[:2]) / math.exp(p[2])
    return {
        "predicted": True,
        "n": len(us),
        "u_mean": float(np.mean(us)),
        "median_wait": point_median,
        "median": {"lower": past_as_none(lo_m), "upper": past_as_none(hi_m)},
        "floor_at_last": float(np.mean(stats.norm.sf(z))),
        "floor_interval": [float(lo_f), float(hi_f)],
        "uninformative": bool(lo_m <= every and not math.isfinite(hi_m)),
    }


def observe(runs: list[dict[str, Any]], last: int) -> dict[str, Any]:
    """runs: {"escape": step or None}; read as read_arm reads the predictive draws."""
    steps = np.array([r["escape"] if r["escape"] is not None else math.inf for r in runs], dtype=float)
    median, floor = read_arm(steps, last)
    return {"n": len(runs), "median": past_as_none(float(median)), "floor_at_last": float(floor)}


def held(prediction: dict[str, Any], observed: dict[str, Any]) -> dict[str, Any]:
    """Whether each observed quantity falls in its predictive interval."""
    if not prediction.get("predicted"):
        return {"median": None, "floor": None, "held": None}
    lo, hi = prediction["median"]["lower"], prediction["median"]["upper"]
    m = observed["median"] if observed["median"] is not None else math.inf
    in_median = (lo if lo is not None else math.inf) <= m <= (hi if hi is not None else math.inf)
    f_lo, f_hi = prediction["floor_interval"]
    in_floor = f_lo - 1e-12 <= observed["floor_at_last"] <= f_hi + 1e-12
    return {"median": bool(in_median), "floor": bool(in_floor), "held": bool(in_median and in_floor)}
