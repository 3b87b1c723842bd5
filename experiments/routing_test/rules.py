"""The routing test's decision rules, each beside the prediction it decides.

A Prediction is data (id, title, the prediction in words, the rule in words, the variants it needs)
with a small decide function over an Outcome (per-variant summaries, the two reference levels, the
margin). verdicts() applies every prediction behind two guards (the reference model must have
learned; a verdict a longer run would change is provisional). place() is the rule behind the
table's "place" column. The numbers they read come from experiments.routing_test; the words they
produce are printed by experiments.routing_test.report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experiments.shared.places import place  # noqa: F401 - the routing test's rule, read here by its predictions
from experiments.shared.stated import Stated, StatedOutcome
from experiments.statistics.stats import PACE_FACTOR

MARGIN_CHECK = (0.5, 2.0)  # each verdict is also decided at these multiples of the margin
# PACE_FACTOR: provisional = the verdict would change in a run this many times longer, at the current pace


# ----- predictions: data, each with a small decide function -----------------------------------------


class Outcome(StatedOutcome):
    """What a decide function sees: per-variant summaries, the two levels and the margin."""

    def loss(self, name: str) -> dict[str, float]:
        return self.variants[name]["final_val_loss"]


@dataclass(frozen=True)
class Prediction(Stated):
    needs: tuple[str, ...]
    decide: Callable[[Outcome], tuple[str, str, str]]  # -> (verdict, measured, separation)
    reads_alpha: bool = False  # decided on alpha_tt rather than on losses


def below(a: dict[str, float], level: float, m: float) -> bool:
    """a's mean is below level by more than the margin and, with >= 3 seeds, by more than 3 seed std."""
    gap = level - a["mean"]
    return gap > m and (a["n"] < 3 or gap > 3 * a["std"])


def above(a: dict[str, float], level: float, m: float) -> bool:
    gap = a["mean"] - level
    return gap > m and (a["n"] < 3 or gap > 3 * a["std"])


def separation(a: dict[str, float], b: float | dict[str, float]) -> str:
    """Mean a minus b in nats, and in seed standard deviations where a has >= 2 seeds."""
    b_mean = b["mean"] if isinstance(b, dict) else b
    diff = a["mean"] - b_mean
    text = f"{diff:+.3f} nats"
    stds = [a["std"]] + ([b["std"]] if isinstance(b, dict) else [])
    if a["n"] >= 2:
        pooled = math.sqrt(sum(s * s for s in stds) / len(stds))
        text += f" = {diff / pooled:+.1f} seed-std" if pooled > 0 else " (seed std 0)"
    else:
        text += " (1 seed: no seed std)"
    return text


def decide_p1(o: Outcome) -> tuple[str, str, str]:
    f, a = o.loss("ffn_only"), o.loss("attn_only")
    U, B, m = o.unigram, o.bigram, o.margin
    at_floor, recovers = f["mean"] >= U - m, below(a, B, m)
    contradicts = not at_floor or a["mean"] >= U - m
    verdict = "supports" if at_floor and recovers else ("contradicts" if contradicts else "inconclusive")
    measured = f"ffn_only {f['mean']:.3f}, attn_only {a['mean']:.3f} (floor {U:.3f}, bigram {B:.3f})"
    return verdict, measured, f"attn_only - ffn_only: {separation(a, f)}"


def decide_p2(o: Outcome) -> tuple[str, str, str]:
    v = o.variants["attn_only"]
    alpha, base = v["alpha_tt_layer_mean"], v["uniform_baseline"]
    mean_alpha = sum(alpha) / len(alpha)
    measured = (
        f"attn_only alpha_tt per layer {', '.join(f'{a:.2f}' for a in alpha)} (mean {mean_alpha:.2f}; "
        f"uniform baseline {base:.3f}, so {mean_alpha / base:.1f}x uniform)"
    )
    if full_alpha := o.variants.get("full", {}).get("alpha_tt_layer_mean"):
        measured += f"; full: {', '.join(f'{a:.2f}' for a in full_alpha)}"
    verdict = "supports" if mean_alpha >= 0.8 else ("contradicts" if max(alpha) < 0.5 else "inconclusive")
    return verdict, measured, f"mean alpha_tt {mean_alpha:.2f} vs 1 (near 1: >= 0.8)"


def decide_p3(o: Outcome) -> tuple[str, str, str]:
    p = o.loss("attn_only + position_blind")
    U, B, m = o.unigram, o.bigram, o.margin
    paper_rule = "supports" if p["mean"] > 3.20 else ("refutes" if p["mean"] < 1.75 else "undecided")
    if p["mean"] >= U - m:
        verdict, reading = "supports", "at the floor: without attention not even the current token gets through"
    elif abs(p["mean"] - B) <= m:
        verdict = "inconclusive"
        reading = "at the bigram level: exactly what any pointwise mixer can reach, so it measures 'no context'"
    elif below(p, B, m):
        verdict, reading = "contradicts", "below bigram: a pointwise mixer cannot do that unless context leaks"
    else:
        verdict, reading = "inconclusive", "between bigram and floor"
    measured = f"{p['mean']:.3f}; paper's rule (>3.20 supports, <1.75 refutes): {paper_rule}; {reading}"
    return verdict, measured, f"vs bigram: {separation(p, B)}; vs floor: {separation(p, U)}"


def decide_p4(o: Outcome) -> tuple[str, str, str]:
    n, a = o.loss("attn_only + no_self"), o.loss("attn_only")
    B, m = o.bigram, o.margin
    lost = n["mean"] >= B - m
    kept = n["mean"] <= a["mean"] + max(m, 3 * max(n["std"], a["std"]))
    verdict = "supports" if lost else ("contradicts" if kept else "inconclusive")
    measured = f"attn_only + no_self {n['mean']:.3f} vs attn_only {a['mean']:.3f} (bigram {B:.3f})"
    return verdict, measured, f"no_self - attn_only: {separation(n, a)}"


def decide_p5(o: Outcome) -> tuple[str, str, str]:
    s = o.loss("ffn_only + self_only")
    U, B, m = o.unigram, o.bigram, o.margin
    at_bigram, at_floor = abs(s["mean"] - B) <= m, s["mean"] >= U - m
    # inconclusive: between bigram and floor, or below bigram (context leaks)
    verdict = "supports" if at_bigram else ("contradicts" if at_floor else "inconclusive")
    measured = f"ffn_only + self_only {s['mean']:.3f} (bigram {B:.3f}, floor {U:.3f})"
    return verdict, measured, f"vs bigram: {separation(s, B)}; vs floor: {separation(s, U)}"


def decide_p6(o: Outcome) -> tuple[str, str, str]:
    s = o.loss("ffn_only + self_bias")
    B, m = o.bigram, o.margin
    # inconclusive: below bigram by the margin, but within 3 seed std of it
    verdict = "supports" if below(s, B, m) else ("contradicts" if B - s["mean"] <= m else "inconclusive")
    measured = f"ffn_only + self_bias {s['mean']:.3f} (bigram {B:.3f})"
    return verdict, measured, f"vs bigram: {separation(s, B)}"


def decide_p7(o: Outcome) -> tuple[str, str, str]:
    u, a = o.loss("attn_only + uniform"), o.loss("attn_only")
    B, m = o.bigram, o.margin
    if above(u, a["mean"], m) and below(u, B, m):
        verdict = "supports"
        frac = (B - u["mean"]) / (B - a["mean"])
        where = f"recovers {frac:.0%} of the way from bigram to attn_only"
    elif u["mean"] <= a["mean"] + m:
        verdict, where = "contradicts", "as good as (or better than) attn_only: content-based routing is not needed"
    else:
        verdict, where = "contradicts", "no better than bigram: averaging gives nothing"
    measured = f"attn_only + uniform {u['mean']:.3f} (attn_only {a['mean']:.3f}, bigram {B:.3f}); {where}"
    return verdict, measured, f"vs attn_only: {separation(u, a)}; vs bigram: {separation(u, B)}"


PREDICTIONS = [
    Prediction(
        "P1",
        "asymmetry",
        "ffn_only sits at the unigram floor; attn_only far below it (below bigram)",
        "supports if ffn_only >= floor - {m} and attn_only < bigram - {m} (by 3 seed std too with >= 3 seeds)",
        ("ffn_only", "attn_only"),
        decide_p1,
    ),
    Prediction(
        "P2",
        "mechanism",
        "attn_only's attention puts alpha_tt near 1 on the current token",
        "supports if the layer-mean alpha_tt >= 0.8; contradicts if every layer < 0.5",
        ("attn_only",),
        decide_p2,
        reads_alpha=True,
    ),
    Prediction(
        "P3",
        "the paper's mixer test",
        "a position-blind mixer in attn_only collapses to the floor",
        "read against the bigram level (+/- {m}); at bigram = inconclusive (no context, not no routing)",
        ("attn_only + position_blind",),
        decide_p3,
    ),
    Prediction(
        "P4",
        "attn_only needs alpha_tt",
        "forbidding the self path (alpha_tt = 0) loses attn_only's recovery",
        "supports if no_self >= bigram - {m}; contradicts if it stays within max({m}, 3 std) of attn_only",
        ("attn_only + no_self", "attn_only"),
        decide_p4,
    ),
    Prediction(
        "P5",
        "identity restores the current token",
        "ffn_only + self_only reaches the bigram level, not the floor",
        "supports if within {m} of bigram; contradicts if >= floor - {m}",
        ("ffn_only + self_only",),
        decide_p5,
    ),
    Prediction(
        "P6",
        "ffn_only's collapse is an early-training trap",
        "with a self-focused start that can still read context, ffn_only goes below the bigram level",
        "supports if below bigram by more than {m} and 3 seed std; contradicts if not below bigram - {m}",
        ("ffn_only + self_bias",),
        decide_p6,
    ),
    Prediction(
        "P7",
        "routing needs content",
        "attn_only + uniform sits between the bigram level and attn_only",
        "supports if attn_only + {m} < uniform < bigram - {m} (by 3 seed std too with >= 3 seeds)",
        ("attn_only + uniform", "attn_only"),
        decide_p7,
    ),
]


def reference_guard(variants: dict[str, Any], bigram: float, margin: float) -> str | None:
    """Why nothing can be decided (full did not learn to use context), or None."""
    full = variants.get("full")
    if full is None:
        return "the reference model (full) was not run"
    if not below(full["final_val_loss"], bigram, margin):
        return (
            f"the reference model did not learn: full {full['final_val_loss']['mean']:.3f} is not below "
            f"bigram {bigram:.3f} - {margin}"
        )
    return None


def moves(v: dict[str, Any], margin: float) -> bool:
    """Would this variant's loss move by more than the margin in a run PACE_FACTOR times longer?"""
    proj = v.get("projected_val_loss")
    return proj is not None and abs(proj["mean"] - v["final_val_loss"]["mean"]) > margin


def at_pace(variants: dict[str, Any], margin: float) -> dict[str, Any]:
    """The variants as a run PACE_FACTOR times longer would leave them at their current pace: each loss
    that would still move by more than the margin moves to its projection, and alpha_tt to its own."""
    out = {}
    for name, v in variants.items():
        moved = dict(v)
        if moves(v, margin):
            moved["final_val_loss"] = {**v["final_val_loss"], "mean": v["projected_val_loss"]["mean"]}
        if v.get("alpha_tt_projected"):
            moved["alpha_tt_layer_mean"] = v["alpha_tt_projected"]
        out[name] = moved
    return out


def verdicts(
    variants: dict[str, Any], levels: dict[str, float], margin: float, predictions: list[Prediction] = PREDICTIONS
) -> list[dict[str, Any]]:
    """Every prediction decided on the numbers, behind two guards.

    reference   nothing is decided unless `full` learned to use context (below bigram - margin):
                otherwise every verdict is "inconclusive: the reference model did not learn"
    settling    each verdict is decided again on the variants as a run PACE_FACTOR times longer would
                leave them at their pace over the second half of training (at_pace); where that
                verdict differs, the verdict is provisional, heading to the other one, and the
                variants still moving by more than the margin are named
    """
    unigram, bigram = levels["unigram"], levels["bigram"]
    later = at_pace(variants, margin)

    def decide(p: Prediction, vs: dict[str, Any], m: float = margin) -> tuple[str, str, str]:
        if guard := reference_guard(vs, bigram, m):
            return "inconclusive", f"not decided: {guard}", "n/a"
        return p.decide(Outcome(vs, unigram, bigram, m))

    out = []
    for p in predictions:
        item = p.stated(margin, provisional=False, heading=None, still_moving=[], at_margins={})
        if not all(n in variants for n in p.needs):
            item.update(measured="not run", verdict="inconclusive", separation="n/a (variant not in --variants)")
            out.append(item)
            continue
        verdict, measured, sep = decide(p, variants)
        at_margins = {f"{f * margin:g}": decide(p, variants, f * margin)[0] for f in MARGIN_CHECK}
        item.update(measured=measured, verdict=verdict, separation=sep, at_margins=at_margins)
        heading = decide(p, later)[0]
        if heading != verdict:
            guard_moves = reference_guard(variants, bigram, margin) != reference_guard(later, bigram, margin)
            names = (*p.needs, "full") if guard_moves and "full" not in p.needs else p.needs
            moving = [text for n in names for text in moving_text(n, variants[n], later[n], p.reads_alpha)]
            item.update(provisional=True, heading=heading, still_moving=moving)
        out.append(item)
    return out


def moving_text(name: str, now: dict[str, Any], later: dict[str, Any], alpha_too: bool) -> list[str]:
    """What moves `name` in at_pace: its loss (by more than the margin) and, if asked, its alpha_tt."""
    out = []
    a, b = now["final_val_loss"]["mean"], later["final_val_loss"]["mean"]
    if a != b:
        out.append(f"{name} {'falling' if b < a else 'rising'}: {a:.3f} now, {b:.3f} at {PACE_FACTOR}x the steps")
    alpha, alpha_later = now.get("alpha_tt_layer_mean"), later.get("alpha_tt_layer_mean")
    if alpha_too and alpha and alpha_later and alpha_later != alpha:
        out.append(
            f"{name} mean alpha_tt {sum(alpha) / len(alpha):.2f} now, "
            f"{sum(alpha_later) / len(alpha_later):.2f} at {PACE_FACTOR}x the steps"
        )
    return out
