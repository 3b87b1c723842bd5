"""The interventions experiment's predictions, each beside the rule that decides it.

Written from the cross-position routing hypothesis (docs/DESIGN.md, "The question"; the routing
test's P1-P7 in experiments.routing_test.rules) before any intervention was run: where a model lacks an
identity path, attention's self path (alpha_tt near 1) stands in for it, and context arrives by
content-based routing. Each InterventionPrediction names the variants it needs, the routing-test prediction it
bears on and how (confirms: the same claim, now at inference inside one trained model; refines: a
sharper claim the training-time test cannot make), and a decide function over an InterventionOutcome (the
variants' effect summaries from experiments.interventions.effects.summarise, the levels, the margin).

Intervals are the 95% bootstrap intervals over validation sequences of the seed-mean effect. "Raises
the loss" means the interval's lower end is above the margin; "does not" means its upper end is below
it. With three or more seeds an effect must also clear 3 seed standard deviations of the per-seed mean
change (the routing test's rule, docs/DESIGN.md contract 8): the interval covers the validation
sequences, the spread covers training. A layer's effect is read at the layer where the intervention
hurts most (peak). A prediction on a
model that sits at the unigram floor (clean loss >= unigram - margin) is not decided: such a model
has nothing left to lose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from experiments.shared.stated import Stated, StatedOutcome


class InterventionOutcome(StatedOutcome):
    """A StatedOutcome whose variants are name -> experiments.interventions.effects.summarise(...)."""

    def layers(self, variant: str, intervention: str) -> list[dict[str, Any]] | None:
        return self.variants[variant]["layers"].get(intervention)

    def spread(self, variant: str, intervention: str, layer: int) -> float:
        """3 seed std of the layer's mean change with >= 3 seeds, else 0 (the interval alone decides)."""
        v = self.variants[variant]
        if v.get("n_seeds", 1) < 3:
            return 0.0
        return 3 * float(v.get("seed_spread", {}).get(intervention, [0.0] * (layer + 1))[layer])


@dataclass(frozen=True)
class InterventionPrediction(Stated):
    needs: tuple[str, ...]  # variants
    bears_on: str  # the routing-test prediction
    relation: str  # "confirms" or "refines"
    decide: Callable[[InterventionOutcome], tuple[str, str, str]]  # -> (verdict, measured, interval)


def ci(x: dict[str, float]) -> str:
    return f"{x['mean']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"


def peak(rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The layer where the loss rises most, and its row."""
    layer = max(range(len(rows)), key=lambda i: rows[i]["delta"]["mean"])
    return layer, rows[layer]


def raises(o: InterventionOutcome, variant: str, intervention: str) -> tuple[str, str, str]:
    """supports if the peak layer's interval lies above the margin; contradicts if every layer's lies below."""
    rows = o.layers(variant, intervention)
    if rows is None:
        return "inconclusive", f"{intervention} does not apply to {variant}", "n/a"
    layer, row = peak(rows)
    seeds = o.spread(variant, intervention, layer)
    supports = row["delta"]["lo"] > o.margin and row["delta"]["mean"] - o.margin > seeds
    every_below = all(r["delta"]["hi"] < o.margin for r in rows)
    verdict = "supports" if supports else ("contradicts" if every_below else "inconclusive")
    changes = ", ".join(f"{r['delta']['mean']:+.3f}" for r in rows)
    measured = f"{variant}, {intervention}: change in loss per layer {changes}"
    spread = f"; 3 seed std {seeds:.3f}" if seeds else ""
    return verdict, measured, f"peak layer {layer}: {ci(row['delta'])} nats{spread}"


def smaller(o: InterventionOutcome, small: tuple[str, str], large: tuple[str, str]) -> tuple[str, str, str]:
    """supports if small's peak interval lies wholly below large's; contradicts if wholly above."""
    rows_s, rows_l = o.layers(*small), o.layers(*large)
    if rows_s is None or rows_l is None:
        return "inconclusive", "an intervention does not apply", "n/a"
    (ls, s), (ll, big) = peak(rows_s), peak(rows_l)
    seeds = (o.spread(*small, ls) ** 2 + o.spread(*large, ll) ** 2) ** 0.5
    apart = abs(big["delta"]["mean"] - s["delta"]["mean"]) > seeds
    wholly_below, wholly_above = s["delta"]["hi"] < big["delta"]["lo"], s["delta"]["lo"] > big["delta"]["hi"]
    verdict = "supports" if wholly_below and apart else ("contradicts" if wholly_above and apart else "inconclusive")
    measured = (
        f"{small[0]} {small[1]} peak {s['delta']['mean']:+.3f} (layer {ls}); "
        f"{large[0]} {large[1]} peak {big['delta']['mean']:+.3f} (layer {ll})"
    )
    spread = f"; 3 seed std {seeds:.3f}" if seeds else ""
    return verdict, measured, f"{ci(s['delta'])} vs {ci(big['delta'])} nats{spread}"


decide_i1 = partial(raises, variant="full", intervention="remove_attn_residual")
decide_i2 = partial(smaller, small=("full", "knock_out_self"), large=("full", "remove_attn_residual"))
decide_i3 = partial(raises, variant="attn_only", intervention="knock_out_self")
decide_i4 = partial(smaller, small=("attn_only", "self_only"), large=("attn_only", "knock_out_self"))
decide_i5 = partial(raises, variant="attn_only", intervention="uniform_pattern")
decide_i6 = partial(
    smaller, small=("attn_only", "remove_attn_residual"), large=("attn_only + no_self", "remove_attn_residual")
)


def decide_i7(o: InterventionOutcome) -> tuple[str, str, str]:
    rows = o.layers("ffn_only + self_bias", "knock_out_self")
    if rows is None:
        return "inconclusive", "knock_out_self does not apply", "n/a"
    floor = o.unigram - o.margin
    every_at_floor, some_below = all(r["loss"]["lo"] >= floor for r in rows), any(r["loss"]["hi"] < floor for r in rows)
    verdict = "supports" if every_at_floor else ("contradicts" if some_below else "inconclusive")
    lowest = min(range(len(rows)), key=lambda i: rows[i]["loss"]["mean"])
    measured = (
        "ffn_only + self_bias, knock_out_self: loss per layer "
        + ", ".join(f"{r['loss']['mean']:.3f}" for r in rows)
        + f" (floor {o.unigram:.3f})"
    )
    return verdict, measured, f"lowest, layer {lowest}: {ci(rows[lowest]['loss'])} vs unigram - m = {floor:.3f}"


def decide_i8(o: InterventionOutcome) -> tuple[str, str, str]:
    rows = o.layers("ffn_only + self_bias", "knock_out_self")
    if rows is None or "identity" not in rows[0]:
        return "inconclusive", "no identity probes (--no-identity) or knock_out_self does not apply", "n/a"
    deltas = [r["identity"]["delta_ce"][0] for r in rows]  # offset 0: the current token
    every_rises, some_below = all(d["lo"] > o.margin for d in deltas), any(d["hi"] < o.margin for d in deltas)
    verdict = "supports" if every_rises else ("contradicts" if some_below else "inconclusive")
    weakest = min(range(len(deltas)), key=lambda i: deltas[i]["mean"])
    measured = "ffn_only + self_bias, knock_out_self: current-token probe CE at resid_post per layer " + ", ".join(
        f"{r['identity']['clean_ce'][0]:.2f} -> {r['identity']['ce'][0]:.2f}" for r in rows
    )
    return verdict, measured, f"smallest rise, layer {weakest}: {ci(deltas[weakest])} nats"


PREDICTIONS = [
    InterventionPrediction(
        "I1",
        "full carries the token on its residual",
        "removing the attention residual at a layer of full raises the loss",
        "supports if the peak layer's interval lies above {m}; contradicts if every layer's lies below {m}",
        ("full",),
        "P1",
        "refines",
        decide_i1,
    ),
    InterventionPrediction(
        "I2",
        "full does not need the self path",
        "with its identity path intact, full loses less to a self-path knockout than to losing that path",
        "supports if knock_out_self's peak interval lies wholly below remove_attn_residual's; contradicts "
        "if wholly above",
        ("full",),
        "P2",
        "refines",
        decide_i2,
    ),
    InterventionPrediction(
        "I3",
        "attn_only needs its self path",
        "knocking out the self path at a layer of attn_only raises the loss",
        "supports if the peak layer's interval lies above {m}; contradicts if every layer's lies below {m}",
        ("attn_only",),
        "P4",
        "confirms",
        decide_i3,
    ),
    InterventionPrediction(
        "I4",
        "attn_only's attention is mostly its self path",
        "in attn_only, keeping only the self path (a position-blind read) costs less than removing it",
        "supports if self_only's peak interval lies wholly below knock_out_self's; contradicts if wholly above",
        ("attn_only",),
        "P2",
        "refines",
        decide_i4,
    ),
    InterventionPrediction(
        "I5",
        "attn_only routes by content",
        "replacing attn_only's pattern by causal uniform weights at a layer raises the loss",
        "supports if the peak layer's interval lies above {m}; contradicts if every layer's lies below {m}",
        ("attn_only",),
        "P7",
        "confirms",
        decide_i5,
    ),
    InterventionPrediction(
        "I6",
        "without a self path the residual carries the token alone",
        "removing the attention residual hurts attn_only + no_self more than attn_only",
        "supports if attn_only's peak interval lies wholly below no_self's; contradicts if wholly above",
        ("attn_only", "attn_only + no_self"),
        "P4",
        "refines",
        decide_i6,
    ),
    InterventionPrediction(
        "I7",
        "ffn_only + self_bias lives on its self path",
        "knocking out the self path at any layer of ffn_only + self_bias takes the loss to the floor",
        "supports if every layer's loss interval lies at or above unigram - {m}; contradicts if some "
        "layer's lies below",
        ("ffn_only + self_bias",),
        "P6",
        "refines",
        decide_i7,
    ),
    InterventionPrediction(
        "I8",
        "the self path carries the token identity",
        "knocking out the self path in ffn_only + self_bias removes the current token from the next site",
        "supports if the current-token probe CE at that layer's resid_post rises by more than {m} at every "
        "layer (interval); contradicts if at some layer the rise's interval lies below {m}",
        ("ffn_only + self_bias",),
        "P5",
        "refines",
        decide_i8,
    ),
]


def at_floor(v: dict[str, Any], unigram: float, margin: float) -> bool:
    return v["clean_loss"]["mean"] >= unigram - margin


def intervention_verdicts(
    variants: dict[str, Any],
    levels: dict[str, float],
    margin: float,
    predictions: list[InterventionPrediction] = PREDICTIONS,
) -> list[dict[str, Any]]:
    """Every prediction decided on the variants' effects, behind the floor guard."""
    o = InterventionOutcome(variants, levels["unigram"], levels["bigram"], margin)
    out = []
    for p in predictions:
        item = p.stated(margin, bears_on=p.bears_on, relation=p.relation)
        missing = [n for n in p.needs if n not in variants]
        floored = [n for n in p.needs if n in variants and at_floor(variants[n], o.unigram, margin)]
        if missing:
            item.update(verdict="inconclusive", measured="not run", interval=f"n/a ({', '.join(missing)} not run)")
        elif floored:
            why = f"not decided: {', '.join(floored)} sits at the unigram floor (nothing to lose)"
            item.update(verdict="inconclusive", interval="n/a", measured=why)
        else:
            verdict, measured, interval = p.decide(o)
            item.update(verdict=verdict, measured=measured, interval=interval)
        out.append(item)
    return out


def bearing(v: dict[str, Any]) -> str:
    """What a verdict says about its routing-test prediction, e.g. "confirms P4 at inference"."""
    if v["verdict"] == "inconclusive":
        return f"says nothing about {v['bears_on']}"
    if v["verdict"] == "contradicts":
        return f"contradicts the hypothesis behind {v['bears_on']}"
    return f"{v['relation']} {v['bears_on']} at inference"
