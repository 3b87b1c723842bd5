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

from functools import partial
from typing import Any

from experiments.statistics.held_out import auc_text, held_out_test, leave_group_out, value_at

FEATURES = ("val_loss", "alpha_tt_layer0", "grad_block0", "growth", "identity", "depth")


def early_features(record: dict[str, Any], early: int, warmup: int) -> dict[str, float | None]:
    from experiments.escape_time.mechanism import series

    s = series(record.get("probes", {}))
    curve = list(zip(record["val_curve"]["steps"], record["val_curve"]["loss"], strict=True))
    return {
        "val_loss": value_at(curve, early, finite=True),
        "alpha_tt_layer0": value_at(s.get("alpha_tt_layer0", []), early, finite=True),
        "grad_block0": value_at(s.get("grad_block0", []), min(warmup, early), finite=True),
        "growth": value_at(s.get("growth", []), early, finite=True),
        "identity": value_at(s.get("identity", []), early, finite=True),
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
        seeds = [seed for seed, _, _ in rows]
        n, n_seeds = len(rows), len(set(seeds))
        too_few = f"{n} run(s) over {n_seeds} seed(s); at least 8 runs over 3 seeds are needed"
        out[name] = held_out_test(
            [x for _, x, _ in rows],
            [y for _, _, y in rows],
            partial(leave_group_out, groups=seeds),
            counted="n_escaped",
            counts={"n_seeds": n_seeds},
            too_few=too_few if n_seeds < 3 or n < 8 else None,
            every_run=("escaped", "stayed on the floor"),
        )
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
