"""Which early measurement predicts escape by the last step: one-feature thresholds, held out by seed.

Features at the early step (the phase diagram's, read from the same probes): validation loss, layer-0 alpha_tt, block-0
gradient norm (at step warmup_steps, a reference step: the constant schedule these runs train with does not warm up),
hidden-norm growth, and block-0 current-token decodability (the escape probe); depth itself is a baseline feature. Each
is tested as a threshold classifier (experiments.statistics.held_out.fit_threshold) fitted on all seeds
but one and scored on that seed's runs (every cell's run of that seed), so no run is scored by a threshold it helped
fit. The baseline is the majority class of all the runs, max(k, n - k) / n: a majority held out by seed would
read lower than the base rate (leaving a seed out tips a balanced pool towards the other class, so a held-out
seed's runs are scored against their minority: 6 of 12 escaped read as a 0.33 baseline), and a feature would
then "predict" against a baseline worse than a constant guess.
"""

from __future__ import annotations

import math
from typing import Any

from experiments.statistics.held_out import auc, auc_text, binomial_interval, bootstrap_auc, classify, fit_threshold

FEATURES = ("val_loss", "alpha_tt_layer0", "grad_block0", "growth", "identity", "depth")


def _at(points: list[tuple[int, float]], step: int) -> float | None:
    """The last value at or before `step`."""
    before = [x for s, x in points if s <= step]
    return before[-1] if before and math.isfinite(before[-1]) else None


def early_features(record: dict[str, Any], early: int, warmup: int) -> dict[str, float | None]:
    from experiments.escape_time.mechanism import series

    s = series(record.get("probes", {}))
    curve = list(zip(record["val_curve"]["steps"], record["val_curve"]["loss"], strict=True))
    return {
        "val_loss": _at(curve, early),
        "alpha_tt_layer0": _at(s.get("alpha_tt_layer0", []), early),
        "grad_block0": _at(s.get("grad_block0", []), min(warmup, early)),
        "growth": _at(s.get("growth", []), early),
        "identity": _at(s.get("identity", []), early),
    }


def evaluate_by_seed(samples: list[dict[str, Any]], features: tuple[str, ...] = FEATURES) -> dict[str, Any]:
    """Each feature's seed-held-out test over samples ({"seed", "features", "escaped"})."""
    out = {}
    for name in features:
        rows = [
            (s["seed"], float(s["features"][name]), bool(s["escaped"]))
            for s in samples
            if s["features"].get(name) is not None
        ]
        n, k = len(rows), sum(y for _, _, y in rows)
        seeds = sorted({seed for seed, _, _ in rows})
        item: dict[str, Any] = {"n": n, "n_escaped": k, "n_seeds": len(seeds)}
        if len(seeds) < 3 or n < 8:
            item["untestable"] = f"{n} run(s) over {len(seeds)} seed(s); at least 8 runs over 3 seeds are needed"
        elif k in (0, n):
            item["untestable"] = f"every run {'escaped' if k else 'stayed on the floor'}: nothing to predict"
        else:
            hits = 0
            for seed in seeds:
                train = [(x, y) for s, x, y in rows if s != seed]
                test = [(x, y) for s, x, y in rows if s == seed]
                ys = [y for _, y in train]
                majority = sum(ys) * 2 >= len(ys)
                if len(set(ys)) < 2:
                    hits += sum(y == majority for _, y in test)
                    continue
                model = fit_threshold([x for x, _ in train], ys)
                hits += sum(classify(model, x) == y for x, y in test)
            xs, ys = [x for _, x, _ in rows], [y for _, _, y in rows]
            lo, hi = binomial_interval(hits, n)
            baseline = max(k, n - k) / n  # always guessing the more common outcome
            item.update(accuracy=hits / n, interval=[lo, hi], majority_accuracy=baseline, auc=auc(xs, ys))
            item.update(auc_interval=list(bootstrap_auc(xs, ys)), predicts=lo > baseline)
        out[name] = item
    return out


def verdict_line(name: str, item: dict[str, Any]) -> str:
    if "untestable" in item:
        return f"{name}: not testable ({item['untestable']})"
    lo, hi = item["interval"]
    word = "predicts escape" if item["predicts"] else "does not beat the majority baseline"
    return (
        f"{name}: {word}: held-out accuracy {item['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] against majority "
        f"{item['majority_accuracy']:.2f}; {auc_text(item, 'escape')} ({item['n']} runs, {item['n_escaped']} escaped, "
        f"{item['n_seeds']} seeds)"
    )
