"""Statistics every experiment can use: over seeds, along a curve, and between paired runs.

Plain Python on lists of floats (no numpy), so a number here is the same on every machine.

    stats        mean, sample std, min, max, n of a list: how results.json summarises seeds
    paired_gap   a - b seed by seed (only the seeds both ran), summarised by stats
    mean_columns the column means of equal-length rows (e.g. per-layer values over seeds)
    slope        least-squares slope of ys against xs
    log_pace     slope of a curve against ln(step) over its second half
    tail         how much a validation curve still moves: last-quarter drop and slope, and its
                 value at `factor` times the steps at its log-pace
    settle_step  the first step from which a curve stays below a threshold
"""

from __future__ import annotations

import math
import statistics
from typing import Any

PACE_FACTOR = 3  # tail's default: where a run this many times longer would end


def stats(values: list[float]) -> dict[str, float]:
    """mean, sample std (0 for one value), min, max, n."""
    values = [float(v) for v in values]
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def paired_gap(runs: list[dict[str, Any]], a: str, b: str, key: str = "final_val_loss") -> dict[str, Any] | None:
    """runs[key] of variant a minus that of variant b, seed by seed, over the seeds both ran.

    runs are records with "variant", "seed" and `key` (experiments.runner.frame.run_summary's). Pairing by
    seed removes what a seed shares across variants (data order, initialisation), so the spread is
    that of the difference itself. Returns {"seeds": [...], **stats(differences)}, or None when no
    seed ran both.
    """
    values = {(r["variant"], r["seed"]): r[key] for r in runs}
    seeds = sorted(seed for name, seed in values if name == a and (b, seed) in values)
    if not seeds:
        return None
    return {"seeds": seeds, **stats([values[(a, s)] - values[(b, s)] for s in seeds])}


def mean_columns(rows: list[list[float]]) -> list[float] | None:
    """The mean of each column of equal-length rows (None for no rows)."""
    return [sum(col) / len(col) for col in zip(*rows, strict=True)] if rows else None


def slope(xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Least-squares slope of ys against xs (0 when every x is the same)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


SPIKE_RISE = 0.5  # nats: one evaluation this far above both its neighbours is a spike, not a trend


def spikes(values: list[float], rise: float = SPIKE_RISE) -> set[int]:
    """Indexes of one-evaluation spikes: a value more than `rise` above both neighbours (deep ffn_only runs jump
    to 9.46 for one step and return to the plateau). A least-squares pace through one would read a steep fall."""
    return {i for i in range(1, len(values) - 1) if values[i] - max(values[i - 1], values[i + 1]) > rise}


def log_pace(steps: list[int], values: list[float]) -> float:
    """Least-squares slope of values against ln(step) over the second half of training (step > 0).

    Loss curves are close to straight in log-steps, so final + pace * ln(3) is where a run three
    times longer would end if it kept its recent pace: a rough extrapolation, read as a warning.
    One-evaluation spikes (spikes()) are left out.
    With fewer than two points in the second half, the last two points with step > 0; with fewer
    than that, 0.
    """
    kept = [(s, v) for i, (s, v) in enumerate(zip(steps, values, strict=True)) if i not in spikes(values)]
    points = [(math.log(s), v) for s, v in kept if s > 0 and s >= steps[-1] / 2]
    if len(points) < 2:
        points = [(math.log(s), v) for s, v in kept if s > 0][-2:]
    return slope(*zip(*points, strict=True)) if len(points) >= 2 else 0.0


def tail(steps: list[int], losses: list[float], factor: float = PACE_FACTOR) -> dict[str, Any]:
    """How much a validation curve still moves.

    from_step     the first evaluation of the last quarter of training
    drop          the loss there minus the final loss (positive = still falling)
    slope_per_1k  least-squares slope over the last quarter, nats per 1,000 steps (negative = falling)
    log_pace      log_pace(steps, losses)
    projected     final + log_pace * ln(factor): where a run `factor` times longer would end at that pace
    """
    start = 0.75 * steps[-1]
    points = [(s, v) for s, v in zip(steps, losses, strict=True) if s >= start]
    if len(points) < 2:
        points = list(zip(steps, losses, strict=True))[-2:]
    xs, ys = tuple(s for s, _ in points), tuple(v for _, v in points)
    pace = log_pace(steps, losses)
    return {
        "from_step": xs[0],
        "drop": ys[0] - ys[-1],
        "slope_per_1k": 1000 * slope(xs, ys),
        "log_pace": pace,
        "projected": losses[-1] + pace * math.log(factor),
    }


def settle_step(steps: list[int], values: list[float], threshold: float) -> int | None:
    """The first step from which every later value is below threshold (None if the last one is not)."""
    settle = None
    for s, v in zip(reversed(steps), reversed(values), strict=True):
        if not (v < threshold):
            break
        settle = s
    return settle
