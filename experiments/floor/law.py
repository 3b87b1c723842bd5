"""The wait on the floor as a law in collapse and depth, and what it predicts for an arm before it trains.

law         log T = a + b * u + c * L + sigma(L) * N(0, 1),  log sigma(L) = g0 + g1 * L
            T a run's escape step, u = -log(residual) of its own model at step 0 (experiments.floor.init_measure),
            L its depth. The query/key scale and the width enter only through u: the law has no term of its own
            for them, so an arm at another scale or width is predicted from its runs' u and its depth alone. The
            lr is not a variable: every run it is fitted on and predicts trains at the floor's lr (constant, from
            step 0); the escape-time page's lr 1e-3 against 2e-3 was x1.13 [0.86, 1.44], not distinguishable.
why         one relation in u alone lent depth's whole effect to u and failed across depths (docs/results/
            floor.md, prediction 2): depth 3 at u = 0.44 waited 300 steps where depth 2 at u = 0.54 waited 100. So
            depth has its own term. The spread is not one sigma: the controls' log escape steps spread 0.4 at
            depth 2 and 0.7 at depth 3, the knob arms the same at each depth, so the spread is depth's.
            Fitted on the shipped floor runs (ffn_only, constant lr, depths 2 and 3) this form beats a constant
            sigma by 7 in AIC and an added u * L term does not help (1.6 worse); a law in u alone or in L alone
            is 45-62 worse.
censoring   an escape step is an evaluation step t: the escape happened in (t - every, t] (interval-censored,
            every the run's own evaluation interval); a run still on the floor at its last step is
            right-censored there. Maximum likelihood (scipy).
intervals   BOOTSTRAP refits on runs resampled with replacement within their cell (depth, scale, width: every
            cell keeps its size), seed SEED; each interval is the middle 95% of the refits.
prediction  for an arm of n runs with step-0 collapse u_1..u_n, depth L and last step `last`: for every refit,
            REPEATS times, n escape steps drawn from the law, rounded up to the evaluation grid and censored at
            `last`, read as an observed arm is read (the ceil(n/2)-th escape step, the fraction on the floor at
            `last`). The predicted median is the median of those draws, its interval their middle 95%. A
            predicted median whose interval spans more than MAX_FACTOR (upper / lower) is not a prediction, and
            says so.
held        the observed median inside the predicted interval and within HELD_FACTOR of the predicted median.
spread      where the median cannot be pinned (sigma grows with depth: at depth 4 no affordable seed count
            gives x3), an arm can test sigma(L) itself: its runs' own sigma, fitted by the same likelihood with
            mu and sigma free (fit_spread), against the same fit made on every simulated arm above (predict_arm
            with spread=True). Its interval, the x3 rule and held are the median's; a simulated arm with fewer
            than 3 escapes has no sigma, and where more than SPREAD_UNFIT of them have none it is not a
            prediction.
inputs      fit_wait_law and predict_arm refuse, before any numerical work, with a ToolkitError naming the run and
            the field, a u, depth, escape step, last step or evaluation interval that is not a finite number (NaN,
            inf, a bool, a string): NaN made the least-squares start a numpy LinAlgError, and NaN or inf u a
            "prediction" with u_mean nan. A fit the data allow (3 escapes, two u values, two depths) whose
            optimiser finds no finite maximum says so in its "why", apart from data that cannot fix the law.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from experiments.escape_time.survival import refit_draws
from interp.errors import ToolkitError

BOOTSTRAP = 400
REPEATS = 10  # arms drawn from each refit in a prediction
SEED = 59
MAX_FACTOR = 3.0  # a predicted median whose interval spans more is not a prediction (issue 59)
HELD_FACTOR = 1.5  # held: inside the interval and within this factor of the predicted median
SPREAD_UNFIT = 0.025  # the most simulated arms whose sigma cannot be fitted, for a spread that is a prediction
PARAMS = ("a", "b", "c", "g0", "g1")  # mu = a + b u + c L; log sigma = g0 + g1 L
FORM = "log T = a + b u + c L + sigma(L) N(0, 1), log sigma(L) = g0 + g1 L"


def law_runs(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The runs the law is fitted on: ffn_only at a constant lr, one per (depth, width, scale, seed) - a run
    trained again longer (the confirmation arms: the same model and steps) counts once, at its longest."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        if r["residual"] != "ffn_only" or r["schedule"] != "constant":
            continue
        cell = (r["n_layers"], r.get("d_model"), r["scale"])
        one = {
            "u": r["u"],
            "depth": r["n_layers"],
            "cell": cell,
            "seed": r["seed"],
            "escape": r["escape"][key],
            "last_step": r["last_step"],
        }
        if r.get("eval_every"):  # runs evaluated more often than the preset (the shipped ones have its 25)
            one["every"] = r["eval_every"]
        k = (*cell, r["seed"])
        if k not in best or one["last_step"] > best[k]["last_step"]:
            best[k] = one
    return [best[k] for k in sorted(best, key=str)]


def _number(value: Any, what: str, positive: bool = False, at_least_one: bool = False) -> float:
    """value as a float, or a ToolkitError naming `what`: a real number (not a bool), finite, > 0 where positive,
    >= 1 where at_least_one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ToolkitError(f"{what} is {value!r}: the law needs a finite number")
    try:
        x = float(value)
    except OverflowError:  # an int past float's range (a 400-digit u)
        raise ToolkitError(f"{what} is an integer of {len(str(value))} digits: the law needs a finite number") from None
    if not math.isfinite(x):
        raise ToolkitError(f"{what} is {x}: the law needs a finite number")
    if positive and x <= 0:
        raise ToolkitError(f"{what} is {value!r}: the law needs a number > 0")
    if at_least_one and x < 1:
        raise ToolkitError(f"{what} is {value!r}: the law needs a depth of at least 1 layer")
    return x


def _check_runs(runs: list[dict[str, Any]], every: Any) -> None:
    """A ToolkitError naming the run and field where a run's u, depth, escape step (None: still on the floor),
    last step or own evaluation interval, or `every`, is not a finite number the law can read."""
    _number(every, "the evaluation interval every", positive=True)
    if not isinstance(runs, (list, tuple)):
        raise ToolkitError(f"runs is {type(runs).__name__}: the law is fitted on a list of runs (law_runs')")
    for i, r in enumerate(runs):
        if not isinstance(r, dict):
            raise ToolkitError(f"run {i} is {type(r).__name__}, not a run's dict")
        name = f"run {i} (cell {r.get('cell')}, seed {r.get('seed')})"
        for key in ("u", "depth", "escape", "last_step", "cell"):
            if key not in r:
                raise ToolkitError(f"{name} has no {key}")
        try:
            hash(r["cell"])
        except TypeError:
            raise ToolkitError(f"{name}: its cell is {type(r['cell']).__name__}, not (depth, width, scale)") from None
        _number(r["u"], f"{name}: u")
        _number(r["depth"], f"{name}: depth", at_least_one=True)
        _number(r["last_step"], f"{name}: last_step", positive=True)
        if r["escape"] is not None:
            _number(r["escape"], f"{name}: escape step", positive=True)
            if r["escape"] > r["last_step"]:
                raise ToolkitError(f"{name}: escape step {r['escape']} is past its last step {r['last_step']}")
        if "every" in r:
            _number(r["every"], f"{name}: every", positive=True)


def _columns(runs: list[dict[str, Any]], every: int) -> tuple[np.ndarray, ...]:
    u = np.array([r["u"] for r in runs], dtype=float)
    depth = np.array([r["depth"] for r in runs], dtype=float)
    steps = np.array([math.inf if r["escape"] is None else r["escape"] for r in runs], dtype=float)
    grid = np.array([r.get("every", every) for r in runs], dtype=float)  # a run's own evaluation interval
    last = np.array([r["last_step"] for r in runs], dtype=float)
    return (u, depth, *arm_columns(steps, grid, last))


def _mu_sigma(p: np.ndarray, u: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return p[0] + p[1] * u + p[2] * depth, np.exp(p[3] + p[4] * depth)


def _log_phi(z: np.ndarray) -> np.ndarray:
    """log of the standard normal density; -inf at an infinite z."""
    zf = np.where(np.isfinite(z), z, 0.0)
    return np.where(np.isfinite(z), -0.5 * zf * zf - 0.5 * math.log(2 * math.pi), -np.inf)


def _nll(p: np.ndarray, u, depth, lo, hi, escaped) -> tuple[float, np.ndarray]:
    """The negative log-likelihood and its gradient in PARAMS. Each run's P(lower < z <= upper): an escape
    (log lo, log hi], a run still on the floor (log hi, inf), in units of its sigma about its mu."""
    from scipy import special

    mu, sigma = _mu_sigma(p, u, depth)
    zh = (np.log(hi) - mu) / sigma
    zl = np.where(lo > 0, (np.log(np.maximum(lo, 1e-300)) - mu) / sigma, -np.inf)
    upper, lower = np.where(escaped, zh, np.inf), np.where(escaped, zl, zh)
    flip = lower > 0  # both in the upper tail: P = cdf(-lower) - cdf(-upper) keeps its digits
    a, b = np.where(flip, -upper, lower), np.where(flip, -lower, upper)
    log_b = special.log_ndtr(b)
    log_p = log_b + np.log1p(-np.exp(special.log_ndtr(a) - log_b))
    # d log P / d mu = (phi(lower) - phi(upper)) / (sigma P)
    # d log P / d log sigma = (lower phi(lower) - upper phi(upper)) / P
    r_lo, r_up = np.exp(_log_phi(lower) - log_p), np.exp(_log_phi(upper) - log_p)
    d_mu = (r_lo - r_up) / sigma
    d_ls = np.where(np.isfinite(lower), lower, 0.0) * r_lo - np.where(np.isfinite(upper), upper, 0.0) * r_up
    grad = -np.array([d_mu.sum(), (d_mu * u).sum(), (d_mu * depth).sum(), d_ls.sum(), (d_ls * depth).sum()])
    return float(-log_p.sum()), grad


def _fit_once(u, depth, lo, hi, escaped) -> np.ndarray | None:
    """The maximum (scipy.optimize.minimize, BFGS from least squares on the escape steps), or None where
    the data cannot fix it: fewer than 3 escapes, one u, one depth, or no finite maximum."""
    return _fit_detail(u, depth, lo, hi, escaped)[0]


def _fit_detail(u, depth, lo, hi, escaped) -> tuple[np.ndarray | None, str]:
    """_fit_once's maximum and "", or None and why: what the data lack, or how the optimiser failed."""
    from scipy import optimize

    lacking = [
        what
        for what, short in (
            ("fewer than 3 escapes", int(escaped.sum()) < 3),
            ("one value of u", len(u) == 0 or np.ptp(u) == 0),
            ("one depth", len(depth) == 0 or np.ptp(depth) == 0),
        )
        if short
    ]
    if lacking:
        return None, f"the data cannot fix the law ({', '.join(lacking)}; it needs 3 escapes, two u, two depths)"
    x = np.stack([np.ones_like(u), u, depth], axis=1)
    beta = np.linalg.lstsq(x, np.log(hi), rcond=None)[0]
    start = np.concatenate([beta, [math.log(0.5), 0.0]])
    res = optimize.minimize(
        _nll,
        start,
        args=(u, depth, lo, hi, escaped),
        jac=True,
        method="BFGS",  # L-BFGS-B's compiled step took 16 ms a call here against BFGS's 0.1 ms
        options={"gtol": 1e-7, "maxiter": 2000},
    )
    out = np.asarray(res.x, dtype=float)
    said = f"scipy BFGS: {res.message}"
    if not np.isfinite(out).all() or not math.isfinite(res.fun):
        return None, f"the optimiser failed: no finite maximum ({said})"
    if abs(out[4]) > 5 or out[3] + 5 * abs(out[4]) > 6:  # sigma run off to no maximum
        ends = sorted({float(depth.min()), float(depth.max())})
        sigmas = ", ".join(f"log sigma {out[3] + out[4] * L:.3g} at depth {L:g}" for L in ends)
        return None, f"the optimiser failed: sigma ran off to no maximum ({sigmas}; g1 {out[4]:.3g}; {said})"
    return out, ""


def fit_spread(lo: np.ndarray, hi: np.ndarray, escaped: np.ndarray) -> float | None:
    """One arm's own sigma: the law's likelihood at u = L = 0 (mu and sigma free), maximised; None with fewer
    than 3 escapes or no finite maximum."""
    from scipy import optimize

    if int(escaped.sum()) < 3:
        return None
    zero = np.zeros_like(hi)

    def nll(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = _nll(np.array([x[0], 0.0, 0.0, x[1], 0.0]), zero, zero, lo, hi, escaped)
        return value, grad[[0, 3]]

    logs = np.log(hi[escaped])
    start = np.array([logs.mean(), math.log(max(float(logs.std()), 0.1))])
    res = optimize.minimize(nll, start, jac=True, method="BFGS", options={"gtol": 1e-7, "maxiter": 2000})
    ok = np.isfinite(res.x).all() and math.isfinite(res.fun) and abs(res.x[1]) <= 6
    return float(math.exp(res.x[1])) if ok else None


def arm_columns(steps: np.ndarray, every, last) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, escaped) of escape steps on their evaluation grid (inf: on the floor at `last`); every and last
    a number for one arm, or an array a run (the law's fit)."""
    escaped = np.isfinite(steps)
    hi = np.where(escaped, steps, last).astype(float)
    return np.where(escaped, hi - every, hi), hi, escaped


def _predict_spread(steps: np.ndarray, every: int, last: int, max_factor: float) -> dict[str, Any]:
    """The sigma each simulated arm (a row of `steps`) reads, as fit_spread reads the observed one."""
    fits = [fit_spread(*arm_columns(row, every, last)) for row in steps]
    got = np.array([f for f in fits if f is not None], dtype=float)
    unfit = 1.0 - len(got) / len(fits)
    if len(got) == 0:
        why = f"{unfit:.1%} of the simulated arms have fewer than 3 escapes"
        return {"sigma": None, "interval": [None, None], "factor": None, "unfit": unfit, "is_prediction": False,
                "why_not": why}  # fmt: skip
    lo, hi = draw_interval(got)
    factor = float(hi / lo)
    out = {
        "sigma": float(np.percentile(got, 50, method="higher")),
        "interval": [float(lo), float(hi)],
        "factor": factor,
        "unfit": unfit,
        "is_prediction": bool(factor <= max_factor and unfit <= SPREAD_UNFIT),
    }
    if not out["is_prediction"]:
        out["why_not"] = (
            f"its interval spans x{factor:.1f} (more than x{max_factor:g})"
            if factor > max_factor
            else f"{unfit:.1%} of the simulated arms have fewer than 3 escapes (more than {SPREAD_UNFIT:.1%})"
        )
    return out


def fit_wait_law(runs: list[dict[str, Any]], every: int) -> dict[str, Any]:
    """{fitted, form, a, b, c, g0, g1 (each {value, lower, upper}), sigma_by_depth, n_runs, n_escaped, cells
    (per cell: depth, width, scale, n, n_escaped, u_mean), params, n_refits, draws} or {fitted: False, why};
    a ToolkitError (_check_runs) for a run the law cannot read."""
    _check_runs(runs, every)
    u, depth, lo, hi, escaped = _columns(runs, every)
    cells: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        cells.setdefault(tuple(r["cell"]), []).append(i)
    out: dict[str, Any] = {
        "fitted": False,
        "form": FORM,
        "n_runs": len(runs),
        "n_escaped": int(escaped.sum()),
        "cells": [
            {
                "depth": c[0],
                "width": c[1],
                "scale": c[2],
                "n": len(ix),
                "n_escaped": int(escaped[ix].sum()),
                "u_mean": float(np.mean(u[ix])),
            }
            for c, ix in cells.items()
        ],
    }
    params, failure = _fit_detail(u, depth, lo, hi, escaped)
    if params is None:
        counts = f"{len(runs)} runs, {out['n_escaped']} escaped, {len(set(depth.tolist()))} depth(s)"
        out["why"] = f"no fit: {failure}; {counts}, {len(set(u.tolist()))} value(s) of u"
        return out
    draws = refit_draws(
        lambda k: _fit_once(u[k], depth[k], lo[k], hi[k], escaped[k]),
        lambda rng: np.concatenate([rng.choice(ix, len(ix)) for ix in cells.values()]),  # within each cell
        SEED,
        BOOTSTRAP,
    )
    d = np.array(draws) if draws else params[None]
    for i, name in enumerate(PARAMS):
        out[name] = percentile_interval(params[i], d[:, i])
    out["sigma_by_depth"] = {
        str(L): percentile_interval(math.exp(params[3] + params[4] * L), np.exp(d[:, 3] + d[:, 4] * L))
        for L in sorted(set(depth.astype(int).tolist()))
    }
    out.update(fitted=True, params=params.tolist(), n_refits=len(draws), draws=d.tolist())
    return out


def percentile_interval(value: float, samples: np.ndarray) -> dict[str, float]:
    """{value, lower, upper}: a fitted value and the middle 95% of its refits (interpolated percentiles)."""
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return {"value": float(value), "lower": float(lo), "upper": float(hi)}


def wait_law_median(params, u: float, depth: float) -> float:
    """One run's median wait under the law: exp(a + b u + c L)."""
    p = np.asarray(params, dtype=float)
    exponent = p[0] + p[1] * u + p[2] * depth
    if not exponent < 709:  # exp past a float's range (or NaN): no step a run could wait
        raise ToolkitError(f"the law's median wait at u {u:g}, depth {depth:g} is past any step (exp({exponent:g}))")
    return float(math.exp(exponent))


def draw_interval(draws: np.ndarray) -> tuple[float, float]:
    """The middle 95% of predictive draws (counts and grid steps): its ends are draws, not interpolations."""
    return np.percentile(draws, 2.5, method="lower"), np.percentile(draws, 97.5, method="higher")


def read_arm(steps: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Escape steps (inf: on the floor) read as an observed arm is: (the ceil(n/2)-th step, fraction on the floor)."""
    n = steps.shape[-1]
    on_floor = steps > last
    ordered = np.sort(np.where(on_floor, np.inf, steps), axis=-1)
    return ordered[..., math.ceil(n / 2) - 1], on_floor.mean(axis=-1)


def predict_arm(
    law: dict[str, Any],
    us: list[float],
    depth: int,
    last: int,
    every: int,
    max_factor: float = MAX_FACTOR,
    spread: bool = False,
) -> dict[str, Any]:
    """The module docstring's prediction for an arm of len(us) runs at depth `depth` stopping at `last`;
    max_factor: the widest interval that is still a prediction (math.inf: any with a median inside the run);
    spread: also the arm's own sigma ("spread", _predict_spread), a fit per simulated arm. A ToolkitError, before
    anything is drawn, for a u, depth, last or every that is not a finite number (and no runs at all)."""
    if not isinstance(us, (list, tuple, np.ndarray)) or len(us) == 0:
        raise ToolkitError(f"us is {us!r:.80}: predict_arm needs a list of one u a run of the arm, at least one")
    if not isinstance(law, dict):
        raise ToolkitError(f"law is {type(law).__name__}: predict_arm takes fit_wait_law's result")
    for i, x in enumerate(us):
        _number(x, f"us[{i}] (the u of the arm's run {i})")
    _number(depth, "depth", at_least_one=True)
    _number(last, "last (the arm's last step)", positive=True)
    _number(every, "every (the evaluation interval)", positive=True)
    if isinstance(max_factor, bool) or not isinstance(max_factor, numbers.Real) or not max_factor > 0:
        raise ToolkitError(f"max_factor is {max_factor!r}: a number > 0 (math.inf: any median inside the run)")
    if not law.get("fitted"):
        return {"predicted": False, "why": law.get("why", "no law")}
    fitted = np.asarray(law.get("draws", []), dtype=float)
    if fitted.ndim != 2 or fitted.shape[0] == 0 or fitted.shape[1] < 5 or not np.isfinite(fitted).all():
        raise ToolkitError("law['draws'] is not a table of finite refits (a, b, c, g0, g1): fit_wait_law's result")
    rng = np.random.default_rng(SEED + 1)
    draws = np.repeat(fitted, REPEATS, axis=0)
    u = np.asarray(us, dtype=float)
    mu = draws[:, :1] + draws[:, 1:2] * u[None] + draws[:, 2:3] * depth  # [refits, runs]
    sigma = np.exp(draws[:, 3:4] + draws[:, 4:5] * depth)
    t = np.exp(mu + sigma * rng.standard_normal(mu.shape))
    steps = np.maximum(every, np.ceil(t / every) * every)
    steps[steps > last] = np.inf
    medians, floors = read_arm(steps, last)
    lo, hi = draw_interval(medians)
    point = float(np.percentile(medians, 50, method="higher"))
    f_lo, f_hi = draw_interval(floors)
    factor = float(hi / lo) if math.isfinite(hi) else math.inf
    # under the law itself: how often an arm's median lands where `held` would call it held
    inside = (medians >= lo) & (medians <= hi) & within(medians, point) if math.isfinite(point) else None
    out = {
        "predicted": True,
        "n": len(us),
        "u_mean": float(np.mean(u)),
        "depth": depth,
        "wait_law_median": float(np.median([wait_law_median(law["params"], x, depth) for x in u])),
        "median": past_as_none(point),
        "interval": [past_as_none(lo), past_as_none(hi)],
        "factor": past_as_none(factor),
        "floor_at_last": float(np.median(floors)),
        "floor_interval": [float(f_lo), float(f_hi)],
        "held_if_law_true": None if inside is None else float(np.mean(inside)),
        "max_factor": past_as_none(max_factor),
        "is_prediction": bool(math.isfinite(point) and factor <= max_factor),
    }
    if spread:
        out["spread"] = _predict_spread(steps, every, last, max_factor)
    if not out["is_prediction"]:
        out["why_not"] = (
            f"its median lies past the last step {last}"
            if not math.isfinite(point)
            else f"its interval spans x{factor:.1f} (more than x{max_factor:g})"
            if math.isfinite(factor)
            else f"its interval reaches past the last step {last}"
        )
    return out


def within(values: np.ndarray, point: float) -> np.ndarray:
    return (values <= HELD_FACTOR * point) & (values >= point / HELD_FACTOR)


def tests_something(prediction: dict[str, Any]) -> bool:
    """Whether an arm's stored prediction can be held or fail: its median's, or its spread's."""
    return bool(prediction.get("is_prediction") or (prediction.get("spread") or {}).get("is_prediction"))


def held_spread(prediction: dict[str, Any], observed_sigma: float | None) -> dict[str, Any] | None:
    """held_law's rule on the arm's own sigma (None: fewer than 3 escapes, read as never held); None where the
    prediction has no spread that is a prediction."""
    s = prediction.get("spread")
    if not s or not s.get("is_prediction"):
        return None
    return held_law({"predicted": True, "median": s["sigma"], "interval": s["interval"]}, observed_sigma)


def past_as_none(v: float) -> float | None:
    """A step, or None where it is past the last step (inf)."""
    return float(v) if math.isfinite(v) else None  # None: past the last step


def held_law(prediction: dict[str, Any], observed_median: float | None) -> dict[str, Any]:
    """held: the observed median (None: past the last step) inside the interval and within HELD_FACTOR of the
    predicted median; None where there was no prediction to hold."""
    if not prediction.get("predicted") or prediction.get("median") is None:
        return {"inside": None, "within": None, "held": None}
    lo, hi = prediction["interval"]
    m = math.inf if observed_median is None else observed_median
    inside = (lo if lo is not None else math.inf) <= m <= (hi if hi is not None else math.inf)
    near = bool(within(np.array([m]), prediction["median"])[0])
    return {"inside": bool(inside), "within": near, "held": bool(inside and near)}
