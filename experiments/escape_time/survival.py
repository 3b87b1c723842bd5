"""When a run leaves the floor, and how long runs wait there: escape steps, Kaplan-Meier, a fitted law.

Escape (fixed before any number was seen): the floor threshold is unigram - margin (the routing test's
"at the floor" line). A run escapes at the first evaluation step from which its validation loss stays below
the threshold up to its last evaluation. Two things a curve does near the threshold are treated by rule:

    re-crossings   a run that dips below and comes back has not escaped at the dip: only the last stretch
                   below counts, so a run near the threshold escapes where it finally stays below
    spikes         one evaluation above the threshold with evaluations below on both sides (deep ffn_only
                   runs show one-step loss spikes) does not end a stretch below; two in a row do. The last
                   evaluation has no later neighbour, so a run above the threshold there has not escaped
    non-finite     a non-finite loss is above every threshold

Runs that have not escaped by their last step are censored there. All escape steps are evaluation steps,
so the resolution is the evaluation interval.

The statistics are scipy's (issue 45): the Kaplan-Meier curve and its Greenwood log-log band
(scipy.stats.ecdf on CensoredData), the exact binomial interval (binomtest(...).proportion_ci), the censored
log-normal law's maximum (scipy.optimize.minimize) and its covariance (the inverse Hessian from
scipy.differentiate.hessian). Chosen over lifelines by measurement (2026-12-04, Python 3.11, this machine):
    install     scipy 1.17.1: 35 MB wheel, 143 MB installed; lifelines 0.30.3 adds 119 MB more (matplotlib,
                fonttools, pillow, formulaic, autograd) and pins pandas<3, below the pandas 3.1 installed here
    import      scipy.stats 0.49-0.58 s; lifelines 0.85-0.95 s (`import lifelines`, three runs each)
    agreement   on a constructed 240-run grid (tests' _synthetic_runs): the law's parameters within 3e-8 of
                lifelines' LogNormalAFTFitter, its covariance within 2e-9 (relative), within 1.6e-6 of the torch
                fit it replaces; 96 runs with half censored: 2e-5 and 8e-6 (lifelines' own tolerance). The
                Kaplan-Meier curve and log-log band within 3e-16 of lifelines' KaplanMeierFitter and of the
                hand-written Greenwood they replace. The law's bootstrap intervals are the old ones to 4 decimals.
Ours, where no library does the job: the escape rule above; the band's exact floor (kaplan_meier); the median's
reading at 0.5 (HALF); the stratified refit bootstrap (fit_law: scipy.stats.bootstrap cannot leave out and count
the resamples the fit refuses); the likelihood's gradient (a few lines, for a converged maximum); predictions
from the covariance (predict_escape: the delta method).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

LEVEL = 0.95
Z95 = 1.959963984540054  # the normal quantile of LEVEL's upper tail (scipy.stats.norm.ppf(0.975))
BOOTSTRAP = 200
BOOTSTRAP_SEED = 20261202
# Kaplan-Meier values are float products: a curve at exactly 0.5 can come out 0.5000000000000001 (the median
# was then read one evaluation late). Products of a few hundred factors err by ~1e-13; no curve of so few runs
# has a true value within 1e-9 of 0.5 other than 0.5 itself.
HALF = 0.5 + 1e-9


def margins(margin: float) -> list[float]:
    """The margins below the floor an escape is read at: m/2, m and 2m for --margin m."""
    return [margin / 2, margin, 2 * margin]


def escape_step(steps: Sequence[int], losses: Sequence[float], threshold: float) -> int | None:
    """The escape step of one validation curve (the module docstring's rule), or None (censored)."""
    below = [math.isfinite(x) and x < threshold for x in losses]
    if not below or not below[-1]:
        return None
    i = len(below) - 1
    while i > 0:
        if below[i - 1]:
            i -= 1
        elif i >= 2 and below[i - 2]:  # one evaluation above with both neighbours below: a spike
            i -= 2
        else:
            break
    return int(steps[i])


# ----- Kaplan-Meier and its band (scipy.stats.ecdf) -----------------------------------------------------


def _exact(k: float, m: float) -> tuple[float, float]:
    """Clopper-Pearson interval of k of m at LEVEL, k and m not necessarily whole (an effective sample)."""
    from scipy import stats

    if float(k).is_integer() and float(m).is_integer():
        ci = stats.binomtest(int(k), int(m)).proportion_ci(confidence_level=LEVEL, method="exact")
        return float(ci.low), float(ci.high)
    a = (1 - LEVEL) / 2  # the same beta quantiles binomtest's exact interval is, at a fractional count
    lo = 0.0 if k <= 0 else float(stats.beta.ppf(a, k, m - k + 1))
    hi = 1.0 if k >= m else float(stats.beta.ppf(1 - a, k + 1, m - k))
    return lo, hi


def kaplan_meier(times: Sequence[int], escaped: Sequence[bool]) -> dict[str, list[float]]:
    """Survival (fraction still on the floor) after each distinct escape step, with a 95% band.

    The curve is scipy.stats.ecdf's on CensoredData. The band, at each escape step t:
      - no run censored before t (runs censored at t itself count as still on the floor after it): the fraction
        on the floor is k of n runs, a binomial proportion, and the band is its exact (Clopper-Pearson) interval,
        binomtest(k, n).proportion_ci(method="exact"). It depends on k and n only, not on how the escapes are
        spread (all 16 of 16 gone: [0, 0.21] whether they left at one step or sixteen);
      - after a censoring: scipy's Greenwood log-log band, never narrower than the exact interval at the
        effective sample m = at_risk / S(t-) (the runs at risk over the fraction still on the floor just before
        t: n itself without censoring), taken at the fraction S(t) of m. The floor matters where the log-log
        band is a point (S(t) = 0) or shrinks with few runs at risk.
    at_risk is the number of runs still on the floor and uncensored just before each step."""
    from scipy import stats

    t = np.asarray(times, dtype=float)
    e = np.asarray(escaped, dtype=bool)
    if t.shape != e.shape or t.ndim != 1:
        from interp.errors import ConfigError

        raise ConfigError(f"kaplan_meier: times {t.shape} and escaped {e.shape} must be one entry per run, alike")
    out: dict[str, list[float]] = {"steps": [], "survival": [], "lower": [], "upper": [], "at_risk": []}
    if e.any():
        sf = stats.ecdf(stats.CensoredData(uncensored=t[e], right=t[~e])).sf
        with warnings.catch_warnings():  # undefined at S = 0 (NaN): the exact floor below takes its place
            warnings.simplefilter("ignore", RuntimeWarning)
            band = sf.confidence_interval(confidence_level=LEVEL, method="log-log")
        keep = np.isin(sf.quantiles, t[e])  # ecdf lists censoring times too; the curve steps at escapes only
        before = 1.0
        columns = (sf.quantiles, sf.probabilities, band.low.probabilities, band.high.probabilities)
        for step, s, lo, hi in zip(*(c[keep] for c in columns), strict=True):
            n = int((t >= step).sum())
            if not ((t < step) & ~e).any():
                lo, hi = _exact(int(((t > step) | ((t == step) & ~e)).sum()), len(t))
            else:
                m = n / before
                f_lo, f_hi = _exact(s * m, m)
                lo = f_lo if math.isnan(lo) else min(float(lo), f_lo)
                hi = f_hi if math.isnan(hi) else max(float(hi), f_hi)
            before = float(s)
            for key, value in zip(out, (float(step), float(s), float(lo), float(hi), n), strict=True):
                out[key].append(value)
    out["times"] = sorted(t.tolist())  # every run's escape or last step: who is at risk before the first escape
    return out


def runs_survival(runs: Sequence[dict[str, Any]], margin: str) -> dict[str, list[float]]:
    """kaplan_meier of runs' escape steps at one margin (run["escape"][margin]; None: censored at its last step)."""
    escape = [r["escape"][margin] for r in runs]
    times = [r["last_step"] if e is None else e for r, e in zip(runs, escape, strict=True)]
    return kaplan_meier(times, [e is not None for e in escape])


def survival_at(km: dict[str, list[float]], step: float) -> tuple[float, float, float]:
    """(survival, lower, upper) of a Kaplan-Meier curve at a step: the curve and its band are steps, constant
    from one escape to the next. Before the first escape the survival is 1 and its band the exact one of "all n
    at risk stayed": 0 escapes in 16 runs is [0.79, 1], not [1, 1]."""
    at_risk = sum(1 for t in km.get("times", []) if t >= step)
    value = (1.0, _exact(at_risk, at_risk)[0] if at_risk else 0.0, 1.0)
    for k, s in enumerate(km["steps"]):
        if s > step:
            break
        value = (km["survival"][k], km["lower"][k], km["upper"][k])
    return value


def median_escape(km: dict[str, list[float]]) -> dict[str, float | None]:
    """The median escape step, the smallest step t with S(t) <= 0.5, and its 95% interval read off the band the
    same way (Brookmeyer-Crowley by inversion): None where the curve (or the band's edge) never reaches 0.5 -
    the median lies past the last step the runs were trained to. (HALF: a float product at 0.5 is 0.5.)"""

    def first(key: str) -> float | None:
        return next((s for s, v in zip(km["steps"], km[key], strict=True) if v <= HALF), None)

    return {"median": first("survival"), "lower": first("lower"), "upper": first("upper")}


def survival_cell(runs: Sequence[dict[str, Any]], margin: str) -> dict[str, Any]:
    """What a cell of runs says at one margin: n, n_escaped, seeds, last_step, its Kaplan-Meier curve (km), the
    median escape with its interval, and the survival (with band) at the last step any run reached."""
    km = runs_survival(runs, margin)
    last = max(r["last_step"] for r in runs)
    return {
        "n": len(runs),
        "n_escaped": sum(r["escape"][margin] is not None for r in runs),
        "seeds": [r["seed"] for r in runs],
        "last_step": last,
        "km": km,
        "median": median_escape(km),
        "survival_at_last": list(survival_at(km, last)),
    }


def logrank_p(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> float | None:
    """scipy's log-rank p between two sets of runs ({escape: step or None (on the floor), last_step}); None
    without runs on both sides or without a single escape."""
    from scipy import stats

    if not a or not b or not any(r["escape"] is not None for r in [*a, *b]):
        return None

    def data(rs):
        done = [r["escape"] for r in rs if r["escape"] is not None]
        return stats.CensoredData(uncensored=done, right=[r["last_step"] for r in rs if r["escape"] is None])

    return float(stats.logrank(data(a), data(b)).pvalue)


# ----- the law: a log-normal accelerated-failure-time model (scipy.optimize, scipy.differentiate) --------


def _design(depths: Sequence[float], lrs: Sequence[float], with_lr: bool) -> np.ndarray:
    cols = [np.ones(len(depths)), np.asarray(depths, dtype=float)]
    if with_lr:
        cols.append(np.log2(np.asarray(lrs, dtype=float)))
    return np.stack(cols, axis=1)


def _nll(params: np.ndarray, x: np.ndarray, y: np.ndarray, escaped: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of log T = x @ beta + sigma * N(0, 1), censored runs through the survival
    function (the density of log T: that of T differs by a constant). params [beta..., log sigma] may carry
    trailing batch axes (scipy.differentiate evaluates many points at once)."""
    from scipy import stats

    beta, log_sigma = params[:-1], params[-1]
    z = (y.reshape(-1, *[1] * (params.ndim - 1)) - np.tensordot(x, beta, axes=(1, 0))) / np.exp(log_sigma)
    ev = escaped.reshape(-1, *[1] * (params.ndim - 1))
    return -np.where(ev, stats.norm.logpdf(z) - log_sigma, stats.norm.logsf(z)).sum(axis=0)


def _nll_grad(params: np.ndarray, x: np.ndarray, y: np.ndarray, escaped: np.ndarray) -> np.ndarray:
    from scipy import stats

    sigma = math.exp(params[-1])
    z = (y - x @ params[:-1]) / sigma
    # d log-likelihood / d z: -z for an escape (log pdf), -pdf/sf (the inverse Mills ratio) for a censored run
    dz = np.where(escaped, -z, -np.exp(stats.norm.logpdf(z) - stats.norm.logsf(z)))
    grad_beta = -(dz[:, None] * x).sum(axis=0) / sigma  # dz/dbeta = -x / sigma
    grad_log_sigma = -(dz * z).sum() - escaped.sum()  # dz/dlog sigma = -z; the escapes' -log sigma
    return -np.append(grad_beta, grad_log_sigma)


def refit_draws(fit, resample, seed: int, n: int) -> list[np.ndarray]:
    """A refit bootstrap's draws: n resamples (resample(rng) -> row indices), each fitted (fit(rows) -> the
    parameters, or None where the fit has no finite maximum: such a resample is left out)."""
    rng = np.random.default_rng(seed)
    return [p for p in (fit(resample(rng)) for _ in range(n)) if p is not None]


def fit_lognormal(x: np.ndarray, times: np.ndarray, escaped: np.ndarray) -> np.ndarray | None:
    """Maximum likelihood of log T = x @ beta + sigma * N(0, 1) (scipy.optimize.minimize, L-BFGS-B, started at
    least squares); returns [beta..., log sigma], or None where the data cannot fix it (fewer than 3 escapes,
    or no finite maximum: sigma runs to its bound)."""
    from scipy import optimize

    if int(escaped.sum()) < 3:
        return None
    y = np.log(np.asarray(times, dtype=float))
    ev = np.asarray(escaped, dtype=bool)
    beta0 = np.linalg.lstsq(x, y, rcond=None)[0]
    res = optimize.minimize(
        lambda p: float(_nll(p, x, y, ev)),
        np.append(beta0, 0.0),
        jac=lambda p: _nll_grad(p, x, y, ev),
        method="L-BFGS-B",
        bounds=[(None, None)] * x.shape[1] + [(-6.0, 4.0)],
        options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000},
    )
    out = np.asarray(res.x, dtype=float)
    return out if np.isfinite(out).all() and abs(out[-1]) <= 5.9 else None


def _covariance(params: np.ndarray, x: np.ndarray, times: np.ndarray, escaped: np.ndarray) -> np.ndarray | None:
    """The inverse observed information (the Hessian of the negative log-likelihood at the maximum, from
    scipy.differentiate.hessian): the variance matrix of [beta..., log sigma]. None where it is singular."""
    from scipy import differentiate

    y, ev = np.log(np.asarray(times, dtype=float)), np.asarray(escaped, dtype=bool)
    h = differentiate.hessian(lambda p: _nll(p, x, y, ev), params, initial_step=0.05)
    try:
        cov = np.linalg.inv(h.ddf)
    except np.linalg.LinAlgError:
        return None
    return cov if np.isfinite(cov).all() and (np.diag(cov) > 0).all() else None


def law_median(params: np.ndarray, depth: float, lr: float, with_lr: bool) -> float:
    x = _design([depth], [lr], with_lr)[0]
    return float(math.exp(x @ params[:-1]))


def law_survival(params: np.ndarray, depth: float, lr: float, step: float, with_lr: bool) -> float:
    """P(still on the floor at `step`) under the fitted law."""
    from scipy import stats

    x = _design([depth], [lr], with_lr)[0]
    return float(stats.norm.sf((math.log(step) - x @ params[:-1]) / math.exp(params[-1])))


def fit_law(runs: Sequence[dict[str, Any]], key: str = "escape") -> dict[str, Any]:
    """The law over runs ({n_layers, lr, escape: step or None, last_step}) with bootstrap intervals.

    log(escape step) = a + b * depth [+ c * log2(lr)] + sigma * noise: b is the change of log escape
    time per layer (exp(b): the factor each layer multiplies the wait by). Bootstrap: runs resampled
    within their cell (depth, lr), BOOTSTRAP times, refitted; intervals are the 2.5-97.5 percentiles of
    the refits that converged.

    A fitted law also carries, for a reader with only the results file:
        names       the parameters in order: intercept, per_layer[, per_lr_doubling], log_sigma
        params      their maximum-likelihood values (sigma = exp(log_sigma))
        covariance  their variance matrix, the inverse observed information (None if singular); each coef
                    item's "se" is the square root of its diagonal (sigma's by the delta method)
    predict_escape(law, depth, lr, step) reads a prediction for any cell off these."""
    depths = [r["n_layers"] for r in runs]
    lrs = [r["lr"] for r in runs]
    times = np.array([r[key] if r[key] is not None else r["last_step"] for r in runs], dtype=float)
    escaped = np.array([r[key] is not None for r in runs])
    n, events = len(runs), int(escaped.sum())
    # An lr at which no run escaped would push its coefficient to infinity (the likelihood has no maximum):
    # the lr term is fitted only where runs escaped at two lrs or more, and the record says when it is left out.
    escaping_lrs = {lr for lr, e in zip(lrs, escaped, strict=True) if e}
    with_lr = len(escaping_lrs) > 1
    lr_left_out = len(set(lrs)) > 1 and not with_lr
    base = {
        "n_runs": n,
        "n_escaped": events,
        "with_lr": with_lr,
        "lr_left_out": "escapes at one lr only: the lr dependence cannot be fitted" if lr_left_out else None,
        "depths": sorted(set(depths)),
        "lrs": sorted(set(lrs)),
    }
    if (reason := _refusal(depths, times, escaped)) is not None:
        return {**base, "fitted": False, "reason": reason}
    x = _design(depths, lrs, with_lr)
    params = fit_lognormal(x, times, escaped)
    if params is None:
        return {**base, "fitted": False, "reason": "the likelihood has no finite maximum on these runs"}
    cov = _covariance(params, x, times, escaped)
    boots, skipped = _bootstrap(depths, lrs, x, times, escaped, with_lr)
    boots_a = np.array(boots) if boots else np.empty((0, len(params)))
    names = ["intercept", "per_layer"] + (["per_lr_doubling"] if with_lr else [])
    se = np.sqrt(np.diag(cov)) if cov is not None else [None] * len(params)
    coef = {}
    for k, name in enumerate(names):
        lo, hi = np.percentile(boots_a[:, k], [2.5, 97.5]).tolist() if len(boots_a) else [None, None]
        coef[name] = {"value": float(params[k]), "lower": lo, "upper": hi, "se": _float(se[k])}
    sig = np.exp(boots_a[:, -1]) if len(boots_a) else np.array([])
    coef["sigma"] = {
        "value": float(math.exp(params[-1])),
        "lower": float(np.percentile(sig, 2.5)) if len(sig) else None,
        "upper": float(np.percentile(sig, 97.5)) if len(sig) else None,
        "se": _float(se[-1] * math.exp(params[-1]) if se[-1] is not None else None),
    }
    return {
        **base,
        "fitted": True,
        "names": [*names, "log_sigma"],
        "params": params.tolist(),
        "covariance": cov.tolist() if cov is not None else None,
        "bootstrap": boots_a.tolist(),
        "n_bootstrap": len(boots),
        "n_bootstrap_unfittable": skipped,  # resamples left out: the fit would refuse them (see above)
        "coef": coef,
    }


def _refusal(depths: Sequence[float], times: np.ndarray, escaped: np.ndarray) -> str | None:
    """Why no law can be fitted on these runs (escapes at under two depths, under 3, a step 0); None if it can."""
    n, events = len(times), int(escaped.sum())
    if len({d for d, e in zip(depths, escaped, strict=True) if e}) < 2 or len(set(depths)) < 2:
        return f"escapes at fewer than two depths ({events} of {n} runs escaped): the depth dependence cannot be fitted"
    if events < 3:
        return f"{events} escape(s) in {n} runs: fewer than the 3 a law needs"
    if (times <= 0).any():  # the law is in log(step): a run escaped or stopped at step 0 has no log-time
        return f"{int((times <= 0).sum())} run(s) escaped or stopped at step 0, where the law's log(step) is undefined"
    return None


def _bootstrap(depths, lrs, x: np.ndarray, times: np.ndarray, escaped: np.ndarray, with_lr: bool) -> tuple[list, int]:
    """The refits on runs resampled within their cell (depth, lr), BOOTSTRAP times; and how many were left out."""
    # The stratified refit bootstrap stays a loop here: scipy.stats.bootstrap resamples within samples, but a
    # resample the fit refuses has to be left out and counted, and one NaN there makes its whole interval NaN.
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    cells: dict[tuple, list[int]] = {}
    for i, (d, lr) in enumerate(zip(depths, lrs, strict=True)):
        cells.setdefault((d, lr), []).append(i)
    boots, skipped = [], 0
    depth_a, lr_a = np.array(depths), np.array(lrs)
    for _ in range(BOOTSTRAP):
        idx = np.concatenate([rng.choice(v, size=len(v), replace=True) for v in cells.values()])
        # A resample the fit above would refuse (escapes at one depth, or at one lr with the lr term in) has no
        # finite maximum either: where its optimiser stops is no estimate, and it would set the interval's edge.
        hit = escaped[idx]
        if len(set(depth_a[idx][hit].tolist())) < 2 or (with_lr and len(set(lr_a[idx][hit].tolist())) < 2):
            skipped += 1
            continue
        p = fit_lognormal(x[idx], times[idx], hit)
        if p is not None:
            boots.append(p)
    return boots, skipped


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def predict_escape(law: dict[str, Any], depth: float, lr: float, step: float) -> dict[str, Any]:
    """What a fitted law (fit_law's, or the "law" of a results file) says of a cell: one call, no refit.

        median            exp(a + b * depth [+ c * log2(lr)]): the median escape step
        median_interval   95%, from the covariance: exp(x @ beta -+ 1.96 * sqrt(x' V x))
        survival_at_last  P(still on the floor at `step`) = norm.sf((ln step - x @ beta) / sigma)
        survival_interval 95%, the delta method on that z-score, mapped through norm.sf

    lr is ignored where the law pooled the lrs (with_lr false). {"predicted": False, "reason"} for a law that
    was not fitted or has no covariance."""
    from scipy import stats

    if not law.get("fitted"):
        return {"predicted": False, "reason": law.get("reason")}
    if law.get("covariance") is None:
        return {"predicted": False, "reason": "the law has no covariance (its information matrix is singular)"}
    _check_cell(depth, lr, step)
    params, cov = np.array(law["params"]), np.array(law["covariance"])
    x = _design([depth], [lr], law["with_lr"])[0]
    mu, sigma = float(x @ params[:-1]), math.exp(params[-1])
    se_mu = math.sqrt(float(x @ cov[:-1, :-1] @ x))
    z = (math.log(step) - mu) / sigma
    grad = np.append(-x / sigma, -z)  # dz / d[beta..., log sigma]
    se_z = math.sqrt(float(grad @ cov @ grad))
    return {
        "predicted": True,
        "median": math.exp(mu),
        "median_interval": (math.exp(mu - Z95 * se_mu), math.exp(mu + Z95 * se_mu)),
        "survival_at_last": float(stats.norm.sf(z)),
        "survival_interval": (float(stats.norm.sf(z + Z95 * se_z)), float(stats.norm.sf(z - Z95 * se_z))),
        "step": step,
        "interval": "covariance",
    }


def _check_cell(depth: float, lr: float, step: float) -> None:
    """A cell the law can be read at: a finite depth, an lr and a step > 0 (their logs; else math's ValueError)."""
    from interp.errors import ConfigError

    for name, v in (("depth", depth), ("lr", lr), ("step", step)):
        real = isinstance(v, numbers.Real) and not isinstance(v, bool)  # numpy's ints and floats too
        if not real or not math.isfinite(v) or (name != "depth" and v <= 0):
            raise ConfigError(
                f"escape-time law: {name} must be a finite number{'' if name == 'depth' else ' > 0'}, got {v!r}"
            )


def law_prediction(law: dict[str, Any], depth: float, lr: float, step: float) -> dict[str, Any]:
    """The law's median escape step and survival at `step` for a cell, with bootstrap intervals (the command's
    reading, printed before a held-out depth trains). A law without its bootstrap refits (results files leave
    them out) is read by predict_escape, with intervals from the covariance; "interval" says which."""
    if not law.get("fitted"):
        return {"predicted": False, "reason": law.get("reason")}
    if not law.get("bootstrap"):
        return predict_escape(law, depth, lr, step)
    _check_cell(depth, lr, step)
    with_lr = law["with_lr"]
    params = np.array(law["params"])
    boots = np.array(law["bootstrap"])
    med = [law_median(p, depth, lr, with_lr) for p in boots]
    surv = [law_survival(p, depth, lr, step, with_lr) for p in boots]

    def band(values: list[float]) -> tuple[float | None, float | None]:
        return tuple(np.percentile(values, [2.5, 97.5]).tolist()) if values else (None, None)

    return {
        "predicted": True,
        "median": law_median(params, depth, lr, with_lr),
        "median_interval": band(med),
        "survival_at_last": law_survival(params, depth, lr, step, with_lr),
        "survival_interval": band(surv),
        "step": step,
        "interval": "bootstrap",
    }
