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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Z95 = 1.959963984540054
BOOTSTRAP = 200
BOOTSTRAP_SEED = 20261202


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


def kaplan_meier(times: Sequence[int], escaped: Sequence[bool]) -> dict[str, list[float]]:
    """Survival (fraction still on the floor) after each distinct escape step, with a 95% band.

    Greenwood's variance on the log-log scale (the band stays inside [0, 1]); at_risk is the number of runs
    still on the floor and uncensored just before each step."""
    t = np.asarray(times, dtype=float)
    e = np.asarray(escaped, dtype=bool)
    out: dict[str, list[float]] = {"steps": [], "survival": [], "lower": [], "upper": [], "at_risk": []}
    s, greenwood = 1.0, 0.0
    for step in sorted(set(t[e].tolist())):
        n = int((t >= step).sum())
        d = int(((t == step) & e).sum())
        before, s = s, s * (1 - d / n)
        greenwood += d / (n * (n - d)) if n > d else math.inf
        # Every run at risk escaped here: the log-log band is a point, so the exact (Clopper-Pearson) bound of
        # "none of n stayed" takes its place, times the survival before the step.
        lo, hi = _loglog_band(s, greenwood) if s > 0 else (0.0, before * (1 - (0.025 ** (1 / n))))
        for key, value in zip(out, (step, s, lo, hi, n), strict=True):
            out[key].append(value)
    out["times"] = sorted(t.tolist())  # every run's escape or last step: who is at risk before the first escape
    return out


def _loglog_band(s: float, greenwood: float) -> tuple[float, float]:
    if s <= 0.0 or s >= 1.0 or not math.isfinite(greenwood):
        return (0.0, 1.0) if 0.0 < s < 1.0 else (s, s) if s >= 1.0 else (0.0, 0.0)
    se = math.sqrt(greenwood) / abs(math.log(s))
    return s ** math.exp(Z95 * se), s ** math.exp(-Z95 * se)


def survival_at(km: dict[str, list[float]], step: float) -> tuple[float, float, float]:
    """(survival, lower, upper) of a Kaplan-Meier curve at a step. Before the first escape the survival is 1 and
    its lower bound the exact one of "all n at risk stayed" (0.025 ** (1 / n)), not a point: 0 escapes in 16
    runs is [0.79, 1], not [1, 1]."""
    at_risk = sum(1 for t in km.get("times", []) if t >= step)
    value = (1.0, 0.025 ** (1 / at_risk) if at_risk else 0.0, 1.0)
    for k, s in enumerate(km["steps"]):
        if s > step:
            break
        value = (km["survival"][k], km["lower"][k], km["upper"][k])
    return value


def median_escape(km: dict[str, list[float]]) -> dict[str, float | None]:
    """The median escape step and its 95% interval, read off the curve and its band (Brookmeyer-Crowley by
    inversion): None where the curve (or the band's edge) never reaches 0.5 - the median lies past the last
    step the runs were trained to."""

    def first(key: str) -> float | None:
        return next((s for s, v in zip(km["steps"], km[key], strict=True) if v <= 0.5), None)

    return {"median": first("survival"), "lower": first("lower"), "upper": first("upper")}


# ----- the law: a log-normal accelerated-failure-time model --------------------------------------------


def _design(depths: Sequence[float], lrs: Sequence[float], with_lr: bool) -> np.ndarray:
    cols = [np.ones(len(depths)), np.asarray(depths, dtype=float)]
    if with_lr:
        cols.append(np.log2(np.asarray(lrs, dtype=float)))
    return np.stack(cols, axis=1)


def fit_lognormal(x: np.ndarray, times: np.ndarray, escaped: np.ndarray) -> np.ndarray | None:
    """Maximum likelihood of log T = x @ beta + sigma * N(0, 1), censored runs through the survival
    function; returns [beta..., log sigma], or None where the data cannot fix it (fewer than 3 escapes, or
    the optimiser does not converge to a finite point)."""
    import torch

    if int(escaped.sum()) < 3:
        return None
    X = torch.tensor(x, dtype=torch.float64)
    y = torch.log(torch.tensor(times, dtype=torch.float64))
    ev = torch.tensor(escaped, dtype=torch.bool)
    beta0 = torch.linalg.lstsq(X, y.unsqueeze(1)).solution.squeeze(1)
    params = torch.cat([beta0, torch.zeros(1, dtype=torch.float64)]).requires_grad_(True)
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))

    def nll() -> torch.Tensor:
        beta, log_sigma = params[:-1], params[-1].clamp(-6, 4)
        z = (y - X @ beta) / log_sigma.exp()
        logpdf = normal.log_prob(z) - log_sigma - y  # density of T, not of log T: the -y is constant in params
        logsf = torch.special.log_ndtr(-z)
        return -(torch.where(ev, logpdf, logsf)).sum()

    opt = torch.optim.LBFGS([params], lr=1.0, max_iter=200, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nll()
        loss.backward()
        return loss

    opt.step(closure)
    out = params.detach().numpy().copy()
    if not np.isfinite(out).all() or abs(out[-1]) > 5.9:
        return None
    return out


def law_median(params: np.ndarray, depth: float, lr: float, with_lr: bool) -> float:
    x = _design([depth], [lr], with_lr)[0]
    return float(math.exp(x @ params[:-1]))


def law_survival(params: np.ndarray, depth: float, lr: float, step: float, with_lr: bool) -> float:
    """P(still on the floor at `step`) under the fitted law."""
    x = _design([depth], [lr], with_lr)[0]
    z = (math.log(step) - x @ params[:-1]) / math.exp(params[-1])
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def fit_law(runs: Sequence[dict[str, Any]], key: str = "escape") -> dict[str, Any]:
    """The law over runs ({n_layers, lr, escape: step or None, last_step}) with bootstrap intervals.

    log(escape step) = a + b * depth [+ c * log2(lr)] + sigma * noise: b is the change of log escape
    time per layer (exp(b): the factor each layer multiplies the wait by). Bootstrap: runs resampled
    within their cell (depth, lr), BOOTSTRAP times, refitted; intervals are the 2.5-97.5 percentiles of
    the refits that converged."""
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
    if len({d for d, e in zip(depths, escaped, strict=True) if e}) < 2 or len(set(depths)) < 2:
        return {
            **base,
            "fitted": False,
            "reason": f"escapes at fewer than two depths ({events} of {n} runs escaped): the depth "
            "dependence cannot be fitted",
        }
    if events < 3:
        return {**base, "fitted": False, "reason": f"{events} escape(s) in {n} runs: fewer than the 3 a law needs"}
    x = _design(depths, lrs, with_lr)
    params = fit_lognormal(x, times, escaped)
    if params is None:
        return {**base, "fitted": False, "reason": "the likelihood has no finite maximum on these runs"}
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
    boots_a = np.array(boots) if boots else np.empty((0, len(params)))
    names = ["intercept", "per_layer"] + (["per_lr_doubling"] if with_lr else [])
    coef = {}
    for k, name in enumerate(names):
        lo, hi = np.percentile(boots_a[:, k], [2.5, 97.5]).tolist() if len(boots_a) else [None, None]
        coef[name] = {"value": float(params[k]), "lower": lo, "upper": hi}
    sig = np.exp(boots_a[:, -1]) if len(boots_a) else np.array([])
    coef["sigma"] = {
        "value": float(math.exp(params[-1])),
        "lower": float(np.percentile(sig, 2.5)) if len(sig) else None,
        "upper": float(np.percentile(sig, 97.5)) if len(sig) else None,
    }
    return {
        **base,
        "fitted": True,
        "params": params.tolist(),
        "bootstrap": boots_a.tolist(),
        "n_bootstrap": len(boots),
        "n_bootstrap_unfittable": skipped,  # resamples left out: the fit would refuse them (see above)
        "coef": coef,
    }


def law_prediction(law: dict[str, Any], depth: float, lr: float, step: float) -> dict[str, Any]:
    """The law's median escape step and survival at `step` for a cell, with bootstrap intervals."""
    if not law.get("fitted"):
        return {"predicted": False, "reason": law.get("reason")}
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
    }


if __name__ == "__main__":  # a library module: says so instead of exiting 0 doing nothing
    from experiments.shared.options import not_a_command

    raise SystemExit(not_a_command(__spec__.name))
