"""A one-feature threshold classifier held out (leave-one-out, by group, seeded half splits), the rank AUC with a seeded
bootstrap interval, and an exact binomial interval: the early-predictor tests of the phase diagram and the
escape times. Seeded: the same numbers on every machine.

From libraries: the AUC is scipy.stats.mannwhitneyu's U over n_pos * n_neg, the binomial interval
scipy.stats.binomtest(k, n).proportion_ci(method="exact") (Clopper-Pearson). Ours, where no library does the
job: the threshold classifier and its held-out splits (a decision stump with the project's tie rule; scikit-learn
is no dependency), and the bootstrap loop of the AUC: scipy.stats.bootstrap cannot leave out the resamples with
one class only (their AUC is undefined; one NaN makes its whole interval NaN), and its own generator would move
every published AUC interval, which cannot be recomputed from the shipped results.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

N_SPLITS = 20
N_BOOTSTRAP = 1000
SEED = 2024


def fit_threshold(xs: list[float], ys: list[bool]) -> tuple[float, bool]:
    """(threshold, above): predict the outcome when (x > threshold) == above; the best on (xs, ys), first on ties."""
    values = sorted(set(xs))
    cuts = [values[0] - 1.0] + [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)]
    best, best_hits = (cuts[0], True), -1
    for cut in cuts:
        for above in (True, False):
            hits = sum(((x > cut) == above) == y for x, y in zip(xs, ys, strict=True))
            if hits > best_hits:
                best, best_hits = (cut, above), hits
    return best


def classify(model: tuple[float, bool], x: float) -> bool:
    cut, above = model
    return (x > cut) == above


def leave_one_out(xs: list[float], ys: list[bool]) -> int:
    """Held-out hits of the threshold classifier, each run scored by a classifier fitted without it."""
    return sum(
        classify(fit_threshold(xs[:i] + xs[i + 1 :], ys[:i] + ys[i + 1 :]), xs[i]) == ys[i] for i in range(len(xs))
    )


def leave_group_out(xs: list[float], ys: list[bool], groups: list[Any]) -> int:
    """Held-out hits of the threshold classifier, each group's runs (a seed's) scored by a classifier fitted on the
    other groups; where those hold one class only, by guessing their majority (ties: the positive class)."""
    hits = 0
    for group in sorted(set(groups)):
        train = [(x, y) for g, x, y in zip(groups, xs, ys, strict=True) if g != group]
        test = [(x, y) for g, x, y in zip(groups, xs, ys, strict=True) if g == group]
        train_ys = [y for _, y in train]
        majority = sum(train_ys) * 2 >= len(train_ys)
        if len(set(train_ys)) < 2:
            hits += sum(y == majority for _, y in test)
            continue
        model = fit_threshold([x for x, _ in train], train_ys)
        hits += sum(classify(model, x) == y for x, y in test)
    return hits


def random_splits(xs: list[float], ys: list[bool], n: int = N_SPLITS, seed: int = SEED) -> list[float]:
    """Held-out accuracy on `n` seeded random half splits (fitted on one half, scored on the other)."""
    rng = random.Random(seed)
    out = []
    idx = list(range(len(xs)))
    for _ in range(n):
        rng.shuffle(idx)
        train, test = idx[: len(idx) // 2], idx[len(idx) // 2 :]
        if len({ys[i] for i in train}) < 2:  # one class only: nothing to fit a threshold to
            continue
        model = fit_threshold([xs[i] for i in train], [ys[i] for i in train])
        out.append(sum(classify(model, xs[i]) == ys[i] for i in test) / len(test))
    return out


def auc(xs: list[float], ys: list[bool]) -> float:
    """P(a positive run's x > a negative run's x), ties counting half: Mann-Whitney's U over n_pos * n_neg."""
    from scipy import stats

    pos = [x for x, y in zip(xs, ys, strict=True) if y]
    neg = [x for x, y in zip(xs, ys, strict=True) if not y]
    return float(stats.mannwhitneyu(pos, neg, method="asymptotic").statistic) / (len(pos) * len(neg))


def bootstrap_auc(xs: list[float], ys: list[bool], n: int = N_BOOTSTRAP, seed: int = SEED) -> tuple[float, float]:
    """A seeded percentile bootstrap 95% interval of the AUC (resamples with one class only are skipped)."""
    rng = random.Random(seed)
    values = []
    for _ in range(n):
        pick = [rng.randrange(len(xs)) for _ in xs]
        ry = [ys[i] for i in pick]
        if 0 < sum(ry) < len(ry):
            values.append(auc([xs[i] for i in pick], ry))
    values.sort()
    return values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]


def auc_text(item: dict[str, Any], outcome: str) -> str:
    """An item's AUC ({"auc", "auc_interval"}) read in the direction the feature separates, `outcome` the positive
    class as a verb ("escape", "collapse"): an AUC below 0.5 means lower values have the outcome, so it is written
    as 1 - AUC with "lower values <outcome>" ("AUC 0.00" read as no prediction where it is a perfect one)."""
    a, (lo, hi) = item["auc"], item["auc_interval"]
    if a == 0.5:
        return f"AUC 0.50 [{lo:.2f}, {hi:.2f}], no direction"
    if a > 0.5:
        return f"AUC {a:.2f} [{lo:.2f}, {hi:.2f}], higher values {outcome}"
    return f"AUC {1 - a:.2f} [{1 - hi:.2f}, {1 - lo:.2f}], lower values {outcome}"


def binomial_interval(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a proportion k/n: scipy.stats.binomtest's."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="exact")
    return float(ci.low), float(ci.high)


def value_at(series: list[tuple[int, float]], step: int, exact: bool = False, finite: bool = False) -> float | None:
    """The value at `step` (exact), or at the last step at or before it; None where there is none (or, with
    `finite`, where that value is nan or infinite)."""
    before = [v for s, v in series if (s == step if exact else s <= step)]
    return before[-1] if before and (not finite or math.isfinite(before[-1])) else None


def held_out_test(
    xs: list[float],
    ys: list[bool],
    held_out: Callable[[list[float], list[bool]], int],
    *,
    counted: str,
    too_few: str | None,
    every_run: tuple[str, str],
    counts: dict[str, Any] | None = None,
    names: tuple[str, str] = ("accuracy", "interval"),
    splits: bool = False,
    threshold: bool = False,
) -> dict[str, Any]:
    """One feature's held-out test, the early predictors' of every experiment: {"n", counted (the positive runs),
    **counts}, then why it is untestable (`too_few`, else every run of one class: `every_run`, the words for
    positive and negative), or its held-out hits (`held_out`, the experiment's scheme) as an accuracy with its
    exact interval (keys `names`) beside the majority baseline, the seeded random half splits (`splits`), the AUC
    with its bootstrap interval, the threshold fitted on every run (`threshold`), and whether it "predicts": the
    interval's lower bound above the baseline."""
    n, k = len(xs), sum(ys)
    item: dict[str, Any] = {"n": n, counted: k, **(counts or {})}
    if too_few is not None:
        item["untestable"] = too_few
    elif k in (0, n):
        item["untestable"] = f"every run {every_run[0] if k else every_run[1]}: nothing to predict"
    else:
        hits = held_out(xs, ys)
        lo, hi = binomial_interval(hits, n)
        baseline = max(k, n - k) / n  # always guessing the more common outcome
        accuracy, interval = names
        item.update({accuracy: hits / n, interval: [lo, hi], "majority_accuracy": baseline})
        if splits:
            done = random_splits(xs, ys)
            item.update(split_accuracy=sum(done) / len(done) if done else None, n_splits=len(done))
        item.update(auc=auc(xs, ys), auc_interval=list(bootstrap_auc(xs, ys)))
        if threshold:
            item["threshold"] = list(fit_threshold(xs, ys))
        item["predicts"] = lo > baseline
    return item
