"""python -m experiments.routing_test: the cross-position routing hypothesis, tested end to end.

The paper finds that removing the attention residual (ffn_only) collapses a
Pre-LN GPT to the no-residual floor while removing the FFN residual
(attn_only) does not, and proposes that attention "routes" information
(alpha_tt near 1) as a substitute identity path. Its own test, a
position-blind mixer, cannot tell "no routing" from "no context at all": a
pointwise mixer can never beat the bigram level. So every result here is read
against two data-derived levels:

    unigram  cross-entropy of a model that knows nothing (the collapse floor)
    bigram   cross-entropy of a model that sees only the current token

and nine variants separate the explanations:

    full, attn_only, ffn_only, none    the paper's four configurations
    attn_only + position_blind         the paper's mixer test (no context at all)
    attn_only + uniform                cross-position averaging, no content-based routing
    attn_only + no_self                context without the self path (self_bias = -inf)
    ffn_only + self_only               alpha_tt forced to 1 (self_bias = +inf): identity, no context
    ffn_only + self_bias               a finite bias on the self score: starts self-focused, can read context

results.json schema ("routing-test/3"):
    schema, experiment, preset, seeds, margin, self_bias   what was run and the decision margin (nats)
    config          {"model", "train"} of the preset (before per-variant overrides), variants: name -> overrides
    reference_levels {"unigram", "bigram", "n_targets", ...} on the fixed validation batches
    runs            one per (variant, seed): variant, seed, run_dir, final_val_loss, best_val_loss, best_step,
                    steps, wall_time_s, tokens_per_s, mfu, val_curve / train_curve {steps, loss},
                    alpha_tt [layer][head] (final),
                    alpha_tt_layer_mean, uniform_baseline, block0_grad {steps, norm}, resid_grad {steps, norms},
                    grad_flow {steps, attn, mlp} ([step][layer]), norms {sites, norms}, growth,
                    tail {from_step, drop, slope_per_1k, log_pace, projected}: how much val loss still moved
                    over the last quarter, its slope per ln(step) over the second half and, at that pace,
                    its value at 3x the steps; alpha_tt_projected [layer] likewise
    variants        name -> {final_val_loss: {mean, std, min, max, n}, place, alpha_tt_layer_mean,
                    block0_grad_at {step: norm}, growth, tail_drop {mean, std, ...}, tail_slope_per_1k,
                    projected_val_loss {mean, std, ...}, alpha_tt_projected}
    gaps            {"attn_only - full": {seeds, mean, std, min, max, n}} per-seed paired difference (or null)
    identity        variant -> {"identity": probes.identity.measure(...), "logit_lens": {sites, layers, ce}} on the
                    first seed's final checkpoint (null with --no-identity)
    verdicts        list of {id, title, prediction, measured, verdict, separation, rule, provisional,
                    heading, still_moving [text], at_margins {margin: verdict} (half and twice
                    the margin, on the final numbers)}; nothing is decided unless full is below bigram - margin
                    (then every verdict is inconclusive); with >= 3 seeds a separation must exceed the
                    margin and 3 seed std; provisional (heading: the other verdict) when the verdict
                    decided on the 3x projections differs
    software        versions; wall_time_s (this invocation), train_wall_time_s (sum over runs); created
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import reference_lines, stats
from experiments.frame import Context, Experiment, Group, Variant, check_number, run_summary
from interp.errors import DataError, ToolkitError

SCHEMA = "routing-test/3"
DEFAULT_SELF_BIAS = 4.0
DEFAULT_MARGIN = 0.05  # nats: "at a level" means within this of it
MARGIN_CHECK = (0.5, 2.0)  # each verdict is also decided at these multiples of the margin
PACE_FACTOR = 3  # provisional = the verdict would change in a run this many times longer, at the current pace
PROMPT = "ROMEO:\nWhat light through yonder window breaks?"


def make_variants(self_bias: float = DEFAULT_SELF_BIAS) -> list[Variant]:
    """The nine variants, named by the rule the trainer CLI uses (training.rundir.variant_name)."""
    return [
        Variant.of(residual="full"),
        Variant.of(residual="attn_only"),
        Variant.of(residual="ffn_only"),
        Variant.of(residual="none"),
        Variant.of(residual="attn_only", mixer="position_blind"),
        Variant.of(residual="attn_only", mixer="uniform"),
        Variant.of(residual="attn_only", self_bias=-math.inf),
        Variant.of(residual="ffn_only", self_bias=math.inf),
        Variant.of(residual="ffn_only", self_bias=self_bias),
    ]


# ----- per-run and per-variant summaries ----------------------------------------------------


def summarise_run(record: dict[str, Any]) -> dict[str, Any]:
    final = record["final"]
    probes = record["probes"]
    grads = probes.get("gradients", [])
    attention = [r for r in probes.get("attention", []) if "alpha_tt" in r]
    norms = probes.get("norms", [])
    last_attn = attention[-1] if attention else {}
    last_norms = norms[-1] if norms else {}
    return {
        **run_summary(record),
        "mfu": final["mfu"],
        "alpha_tt": last_attn.get("alpha_tt"),
        "alpha_tt_layer_mean": last_attn.get("alpha_tt_layer_mean"),
        "uniform_baseline": last_attn.get("uniform_baseline"),
        "attention_skipped": (probes.get("attention") or [{}])[-1].get("skipped"),
        "block0_grad": {
            "steps": [g["step"] for g in grads],
            "norm": [math.hypot(g["attn"][0], g["mlp"][0]) for g in grads],
        },
        "resid_grad": {"steps": [g["step"] for g in grads], "norms": [g["resid"] for g in grads]},
        "grad_flow": {
            "steps": [g["step"] for g in grads],
            "attn": [g["attn"] for g in grads],
            "mlp": [g["mlp"] for g in grads],
        },
        "norms": {"sites": last_norms.get("sites"), "norms": last_norms.get("norms")},
        "growth": last_norms.get("growth"),
        "tail": tail(record["val_curve"]["steps"], record["val_curve"]["loss"]),
        "alpha_tt_projected": project_alpha(attention),
    }


def project_alpha(attention: list[dict[str, Any]]) -> list[float] | None:
    """Each layer's mean alpha_tt at PACE_FACTOR times the steps, at its pace over the second half."""
    if not attention:
        return None
    steps = [r["step"] for r in attention]
    layers = zip(*[r["alpha_tt_layer_mean"] for r in attention], strict=True)
    return [min(1.0, max(0.0, series[-1] + log_pace(steps, list(series)) * math.log(PACE_FACTOR)))
            for series in layers]


def log_pace(steps: list[int], values: list[float]) -> float:
    """Least-squares slope of values against ln(step) over the second half of training (step > 0).

    Loss curves are close to straight in log-steps, so final + pace * ln(3) is where a run three
    times longer would end if it kept its recent pace: a rough extrapolation, read as a warning.
    """
    points = [(math.log(s), v) for s, v in zip(steps, values, strict=True) if s > 0 and s >= steps[-1] / 2]
    if len(points) < 2:
        points = [(math.log(s), v) for s, v in zip(steps, values, strict=True) if s > 0][-2:]
    return slope(*zip(*points, strict=True)) if len(points) >= 2 else 0.0


def slope(xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Least-squares slope of ys against xs (0 when every x is the same)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def tail(steps: list[int], losses: list[float]) -> dict[str, Any]:
    """How much a validation curve still moves: its drop over the last quarter of training, the
    least-squares slope of the evaluations there (nats per 1,000 steps; negative = still falling),
    and where it would end at PACE_FACTOR times the steps at its pace over the second half."""
    start = 0.75 * steps[-1]
    points = [(s, v) for s, v in zip(steps, losses, strict=True) if s >= start]
    if len(points) < 2:
        points = list(zip(steps, losses, strict=True))[-2:]
    xs, ys = tuple(s for s, _ in points), tuple(v for _, v in points)
    pace = log_pace(steps, losses)
    return {"from_step": xs[0], "drop": ys[0] - ys[-1], "slope_per_1k": 1000 * slope(xs, ys), "log_pace": pace,
            "projected": losses[-1] + pace * math.log(PACE_FACTOR)}


def place(loss: float, levels: dict[str, float], full: float | None, margin: float) -> str:
    """Where a loss sits among the reference levels (the rule is printed with the table)."""
    unigram, bigram = levels["unigram"], levels["bigram"]
    if loss >= unigram - margin:
        return "at the unigram floor"
    if abs(loss - bigram) <= margin:
        return "at the bigram level"
    if loss > bigram:
        return "between bigram and floor"
    if full is not None and loss <= full + margin:
        return "near full"
    return "below bigram (uses context)"


def mean_columns(rows: list[list[float]]) -> list[float] | None:
    return [sum(col) / len(col) for col in zip(*rows, strict=True)] if rows else None


def block0_at(runs: list[dict[str, Any]], wanted: list[int]) -> dict[str, float]:
    """Mean over seeds of the block-0 gradient norm at the wanted steps (and the last recorded)."""
    out: dict[str, float] = {}
    for step in wanted:
        vals = [r["block0_grad"]["norm"][r["block0_grad"]["steps"].index(step)]
                for r in runs if step in r["block0_grad"]["steps"]]
        if vals:
            out[str(step)] = sum(vals) / len(vals)
    ends = [r["block0_grad"]["norm"][-1] for r in runs if r["block0_grad"]["norm"]]
    if ends:
        out[f"end ({runs[0]['block0_grad']['steps'][-1]})"] = sum(ends) / len(ends)
    return out


def summarise_variants(runs: list[dict[str, Any]], levels: dict[str, float], margin: float) -> dict[str, Any]:
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_variant.setdefault(r["variant"], []).append(r)
    full = by_variant.get("full")
    full_mean = stats([r["final_val_loss"] for r in full])["mean"] if full else None
    out = {}
    for name, rs in by_variant.items():
        loss = stats([r["final_val_loss"] for r in rs])
        alphas = [r["alpha_tt_layer_mean"] for r in rs if r["alpha_tt_layer_mean"]]
        projected = [r["alpha_tt_projected"] for r in rs if r.get("alpha_tt_projected")]
        growths = [r["growth"] for r in rs if r["growth"] is not None]
        out[name] = {
            "final_val_loss": loss,
            "place": place(loss["mean"], levels, None if name == "full" else full_mean, margin),
            "alpha_tt_layer_mean": mean_columns(alphas),
            "uniform_baseline": rs[0]["uniform_baseline"],
            "block0_grad_at": block0_at(rs, [0, 100, 300]),
            "growth": sum(growths) / len(growths) if growths else None,
            "tail_drop": stats([r["tail"]["drop"] for r in rs]),
            "tail_slope_per_1k": stats([r["tail"]["slope_per_1k"] for r in rs])["mean"],
            "projected_val_loss": stats([r["tail"]["projected"] for r in rs]),
            "alpha_tt_projected": mean_columns(projected),
        }
    return out


def paired_gap(runs: list[dict[str, Any]], a: str, b: str) -> dict[str, Any] | None:
    """a - b final val loss, seed by seed (seeds both ran), with its spread: the paper's attn_only - full."""
    finals = {(r["variant"], r["seed"]): r["final_val_loss"] for r in runs}
    seeds = sorted(seed for name, seed in finals if name == a and (b, seed) in finals)
    if not seeds:
        return None
    return {"seeds": seeds, **stats([finals[(a, s)] - finals[(b, s)] for s in seeds])}


# ----- predictions: data, each with a small decide function -----------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a decide function sees: per-variant summaries, the two levels and the margin."""

    variants: dict[str, Any]
    unigram: float
    bigram: float
    margin: float

    def loss(self, name: str) -> dict[str, float]:
        return self.variants[name]["final_val_loss"]


@dataclass(frozen=True)
class Prediction:
    id: str
    title: str
    prediction: str
    rule: str  # "{m}" stands for the margin
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
    if at_floor and recovers:
        verdict = "supports"
    elif not at_floor or a["mean"] >= U - m:
        verdict = "contradicts"
    else:
        verdict = "inconclusive"
    measured = f"ffn_only {f['mean']:.3f}, attn_only {a['mean']:.3f} (floor {U:.3f}, bigram {B:.3f})"
    return verdict, measured, f"attn_only - ffn_only: {separation(a, f)}"


def decide_p2(o: Outcome) -> tuple[str, str, str]:
    v = o.variants["attn_only"]
    alpha, base = v["alpha_tt_layer_mean"], v["uniform_baseline"]
    mean_alpha = sum(alpha) / len(alpha)
    measured = (f"attn_only alpha_tt per layer {', '.join(f'{a:.2f}' for a in alpha)} (mean {mean_alpha:.2f}; "
                f"uniform baseline {base:.3f}, so {mean_alpha / base:.1f}x uniform)")
    full_alpha = o.variants.get("full", {}).get("alpha_tt_layer_mean")
    if full_alpha:
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
    if abs(s["mean"] - B) <= m:
        verdict = "supports"
    elif s["mean"] >= U - m:
        verdict = "contradicts"
    else:
        verdict = "inconclusive"  # between bigram and floor, or below bigram (context leaks)
    measured = f"ffn_only + self_only {s['mean']:.3f} (bigram {B:.3f}, floor {U:.3f})"
    return verdict, measured, f"vs bigram: {separation(s, B)}; vs floor: {separation(s, U)}"


def decide_p6(o: Outcome) -> tuple[str, str, str]:
    s = o.loss("ffn_only + self_bias")
    B, m = o.bigram, o.margin
    if below(s, B, m):
        verdict = "supports"
    elif B - s["mean"] <= m:
        verdict = "contradicts"
    else:
        verdict = "inconclusive"  # below bigram by the margin, but within 3 seed std of it
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
    Prediction("P1", "asymmetry", "ffn_only sits at the unigram floor; attn_only far below it (below bigram)",
               "supports if ffn_only >= floor - {m} and attn_only < bigram - {m} (by 3 seed std too with >= 3 seeds)",
               ("ffn_only", "attn_only"),
               decide_p1),
    Prediction("P2", "mechanism", "attn_only's attention puts alpha_tt near 1 on the current token",
               "supports if the layer-mean alpha_tt >= 0.8; contradicts if every layer < 0.5", ("attn_only",),
               decide_p2, reads_alpha=True),
    Prediction("P3", "the paper's mixer test", "a position-blind mixer in attn_only collapses to the floor",
               "read against the bigram level (+/- {m}); at bigram = inconclusive (no context, not no routing)",
               ("attn_only + position_blind",), decide_p3),
    Prediction("P4", "attn_only needs alpha_tt", "forbidding the self path (alpha_tt = 0) loses attn_only's recovery",
               "supports if no_self >= bigram - {m}; contradicts if it stays within max({m}, 3 std) of attn_only",
               ("attn_only + no_self", "attn_only"), decide_p4),
    Prediction("P5", "identity restores the current token",
               "ffn_only + self_only reaches the bigram level, not the floor",
               "supports if within {m} of bigram; contradicts if >= floor - {m}", ("ffn_only + self_only",), decide_p5),
    Prediction("P6", "ffn_only's collapse is an early-training trap",
               "with a self-focused start that can still read context, ffn_only goes below the bigram level",
               "supports if below bigram by more than {m} and 3 seed std; contradicts if not below bigram - {m}",
               ("ffn_only + self_bias",), decide_p6),
    Prediction("P7", "routing needs content", "attn_only + uniform sits between the bigram level and attn_only",
               "supports if attn_only + {m} < uniform < bigram - {m} (by 3 seed std too with >= 3 seeds)",
               ("attn_only + uniform", "attn_only"), decide_p7),
]


def reference_guard(variants: dict[str, Any], bigram: float, margin: float) -> str | None:
    """Why nothing can be decided (full did not learn to use context), or None."""
    full = variants.get("full")
    if full is None:
        return "the reference model (full) was not run"
    if not below(full["final_val_loss"], bigram, margin):
        return (f"the reference model did not learn: full {full['final_val_loss']['mean']:.3f} is not below "
                f"bigram {bigram:.3f} - {margin}")
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


def verdicts(variants: dict[str, Any], levels: dict[str, float], margin: float,
             predictions: list[Prediction] = PREDICTIONS) -> list[dict[str, Any]]:
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
        guard = reference_guard(vs, bigram, m)
        if guard:
            return "inconclusive", f"not decided: {guard}", "n/a"
        return p.decide(Outcome(vs, unigram, bigram, m))

    out = []
    for p in predictions:
        item = dict(id=p.id, title=p.title, prediction=p.prediction, rule=p.rule.format(m=margin),
                    provisional=False, heading=None, still_moving=[], at_margins={})
        if not all(n in variants for n in p.needs):
            item.update(measured="not run", verdict="inconclusive", separation="n/a (variant not in --variants)")
            out.append(item)
            continue
        verdict, measured, sep = decide(p, variants)
        item.update(measured=measured, verdict=verdict, separation=sep,
                    at_margins={f"{f * margin:g}": decide(p, variants, f * margin)[0] for f in MARGIN_CHECK})
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
        out.append(f"{name} mean alpha_tt {sum(alpha) / len(alpha):.2f} now, "
                   f"{sum(alpha_later) / len(alpha_later):.2f} at {PACE_FACTOR}x the steps")
    return out


def margin_sensitive(v: dict[str, Any]) -> bool:
    return any(other != v["verdict"] for other in v.get("at_margins", {}).values())


def margin_text(v: dict[str, Any]) -> str:
    return "; ".join(f"{other.upper()} at margin {m}" for m, other in v["at_margins"].items())


def verdict_label(v: dict[str, Any]) -> str:
    if not v.get("provisional"):
        return v["verdict"].upper()
    return f"{v['verdict'].upper()} (provisional: heading to {v['heading'].upper()} in a longer run)"


# ----- the experiment -------------------------------------------------------------------------------------


def add_arguments(p) -> None:
    p.add_argument("--self-bias", type=float, default=DEFAULT_SELF_BIAS,
                   help=f"the finite self-score bias of 'ffn_only + self_bias' (default {DEFAULT_SELF_BIAS})")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                   help=f"nats within which a loss counts as at a level (default {DEFAULT_MARGIN})")
    p.add_argument("--no-identity", action="store_true",
                   help="skip the token-identity probes and the logit lens on the first seed's checkpoints")


def check(args) -> None:
    check_number("--margin", args.margin, 0.0, inclusive=False)
    check_number("--self-bias", args.self_bias, 0.0, inclusive=False)


def plan(ctx: Context) -> list[Group]:
    if ctx.spec.model.n_ctx < 3:  # routing needs context; the identity probes read offsets 0, -1, -2
        raise ToolkitError(f"the routing test needs n_ctx >= 3, got --set n_ctx={ctx.spec.model.n_ctx}")
    return [Group(ctx.spec, make_variants(ctx.args.self_bias))]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [summarise_run(r) for r in records]
    summary = summarise_variants(runs, ctx.levels, ctx.args.margin)
    return {"margin": ctx.args.margin, "self_bias": ctx.args.self_bias, "runs": runs, "variants": summary,
            "gaps": {"attn_only - full": paired_gap(runs, "attn_only", "full")},
            "identity": None if ctx.args.no_identity else identity(ctx, runs),
            "verdicts": verdicts(summary, ctx.levels, ctx.args.margin)}


def identity(ctx: Context, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Where is the current token? Identity probes and the logit lens on each variant's first-seed checkpoint.

    Derived from the final checkpoint and cached beside it (identity.json), so a rerun does not refit.
    """
    from tqdm.auto import tqdm

    from interp.io import read_json, write_json
    from probes.identity import identity_sites, identity_summary, too_costly
    from training.data import fixed_batches
    from training.rundir import RunDir

    spec = ctx.spec
    reason = too_costly(spec.model)
    if reason:  # a large vocabulary: the decoders would run for hours with nothing printed
        print(f"identity probes skipped: {reason}; the results hold identity null")
        return None
    first = [r for r in runs if r["seed"] == ctx.seeds[0]]
    out = {}
    per_run = len(identity_sites(spec.model.n_layers)) + 1
    bar = tqdm(total=len(first) * per_run, desc="identity probes", unit="site", disable=not ctx.progress,
               leave=False, dynamic_ncols=True)
    for r in first:
        cached = RunDir(Path(r["run_dir"])).identity
        if cached.exists():
            out[r["variant"]] = read_json(cached)
            bar.update(per_run)
            continue
        bar.set_postfix_str(r["variant"])
        batches = fixed_batches(ctx.corpus.val, spec.model.n_ctx, spec.train.batch_size, spec.train.eval_batches)
        out[r["variant"]] = identity_summary(RunDir(Path(r["run_dir"])).ckpt, ctx.corpus.train, batches,
                                             progress=lambda _: bar.update(1))
        write_json(cached, out[r["variant"]])
    bar.close()
    return out


PLACES = {"at the unigram floor": "floor", "at the bigram level": "bigram", "between bigram and floor": "between",
          "near full": "near full", "below bigram (uses context)": "uses context"}


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per variant, narrow enough for a 120-column console at the cpu-quick shape."""
    headers = ["variant", "final val", "place", "tail drop", "at 3x", "alpha_tt/layer", "block-0 grad", "growth"]
    rows = []
    for name, v in results["variants"].items():
        loss = v["final_val_loss"]
        loss_s = f"{loss['mean']:.3f}" + (f" +/- {loss['std']:.3f}" if loss["n"] > 1 else "")
        alpha = v["alpha_tt_layer_mean"]
        if not alpha:
            alpha_s = "n/a"
        elif len(alpha) <= 4:
            alpha_s = " ".join(f"{a:.2f}" for a in alpha)
        else:
            alpha_s = f"{sum(alpha) / len(alpha):.2f} [{min(alpha):.2f}-{max(alpha):.2f}]"
        grads = list(v["block0_grad_at"].values())
        grad_s = f"{grads[0]:.2g} > {grads[-1]:.2g}" if grads else "n/a"
        growth = f"{v['growth']:.1f}x" if v["growth"] is not None else "n/a"
        rows.append([name, loss_s, PLACES.get(v["place"], v["place"]), f"{v['tail_drop']['mean']:+.3f}",
                     f"{v['projected_val_loss']['mean']:.3f}", alpha_s, grad_s, growth])
    return headers, rows


def summary(results: dict[str, Any]) -> str:
    m = results["margin"]
    baseline = next((v["uniform_baseline"] for v in results["variants"].values() if v["uniform_baseline"]), None)
    lines = [f"place (margin {m} nats): floor if loss >= unigram - m; bigram if |loss - bigram| <= m; near full "
             "if <= full + m; else uses context (below bigram) or between",
             "tail drop: val loss fall over the last quarter; at 3x: where a run 3x longer would end at the "
             "pace (per log-step) of the second half; block-0 grad: step 0 > end"
             + (f"; alpha_tt uniform baseline {baseline:.3f}" if baseline else "")]
    gap = results.get("gaps", {}).get("attn_only - full")
    if gap:
        spread = f" +/- {gap['std']:.3f} (seed std, {gap['n']} seeds)" if gap["n"] > 1 else " (1 seed: no spread)"
        lines.append(f"attn_only - full: {gap['mean']:+.3f} nats{spread}; the paper at 10M: +0.078")
    lines.append("")
    for v in results["verdicts"]:
        lines.append(f"{v['id']} {v['title']}: {verdict_label(v)}")
        lines.append(f"   predicted: {v['prediction']}")
        lines.append(f"   measured:  {v['measured']}")
        lines.append(f"   separation: {v['separation']}   [rule: {v['rule']}]")
        if v.get("still_moving"):
            lines.append(f"   provisional: {'; '.join(v['still_moving'])}")
        if margin_sensitive(v):
            lines.append(f"   margin-sensitive: {margin_text(v)}")
    longer = needs_longer(results)
    if longer:
        lines.append(f"\nwould still move by more than the margin in a run {PACE_FACTOR}x longer "
                     f"(--set max_steps=N): {', '.join(longer)}")
    return "\n".join(lines)


def needs_longer(results: dict[str, Any]) -> list[str]:
    """Variants whose loss would still move by more than the margin in a run PACE_FACTOR times longer."""
    return [name for name, v in results["variants"].items() if moves(v, results["margin"])]


def sections(results: dict[str, Any], ctx: Context) -> list:
    from interp.plots import alpha_tt_heatmap, gradient_flow_heatmap, loss_curves, norm_profile

    runs = results["runs"]
    curves = {f"{r['variant']}/seed{r['seed']}": (r["val_curve"]["steps"], r["val_curve"]["loss"]) for r in runs}
    out: list = [("Verdicts", None, None)]
    out += [f"{v['id']} {v['title']}: {verdict_label(v)}. Predicted: {v['prediction']}. "
            f"Measured: {v['measured']}. Separation: {v['separation']}. Rule: {v['rule']}."
            + (f" Provisional: {'; '.join(v['still_moving'])}." if v.get("still_moving") else "")
            + (f" Margin-sensitive: {margin_text(v)}." if margin_sensitive(v) else "")
            for v in results["verdicts"]]
    longer = needs_longer(results)
    out.append(f"Runs whose validation loss would still move by more than the margin in a run {PACE_FACTOR}x "
               f"longer, at the pace of their second half: {', '.join(longer)}." if longer else
               f"No run's validation loss would move by more than the margin in a run {PACE_FACTOR}x longer "
               "at the pace of its second half.")
    out.append(("Validation loss", loss_curves(curves, reference_lines(results["reference_levels"]),
                                               title="Validation loss (fixed batches)")))
    alphas = {f"{r['variant']}/seed{r['seed']}": np.array(r["alpha_tt"]) for r in runs if r["alpha_tt"]}
    baseline = next((r["uniform_baseline"] for r in runs if r["uniform_baseline"]), None)
    if alphas:
        out.append(("alpha_tt per layer and head (final)",
                    "Mean weight a query puts on its own position, over positions t >= 1; the uniform "
                    f"baseline mean 1/(t+1) is {baseline:.3f}. Position-blind variants have no pattern.",
                    alpha_tt_heatmap(alphas, baseline=baseline)))
    for r in runs:
        flow = r["grad_flow"]
        if not flow["steps"]:
            continue
        grid = np.array([[np.hypot(a, m) for a, m in zip(att, mlp, strict=True)]
                         for att, mlp in zip(flow["attn"], flow["mlp"], strict=True)]).T
        out.append((f"Gradient flow: {r['variant']} seed {r['seed']}", gradient_flow_heatmap(
            grid + 1e-12, flow["steps"], layer_labels=[f"block {i}" for i in range(grid.shape[0])],
            title=f"{r['variant']}: block parameter-gradient norm (before clipping)")))
    profiles = {f"{r['variant']}/seed{r['seed']}": r["norms"]["norms"] for r in runs if r["norms"]["norms"]}
    sites = next((r["norms"]["sites"] for r in runs if r["norms"]["sites"]), None)
    if profiles:
        out.append(("Hidden-norm profile (final, eval mode)",
                    norm_profile(profiles, sites, log_y=True, title="Mean per-token residual norm")))
    if results.get("identity"):
        from interp.plots import identity_accuracy, logit_lens_ce

        ident = results["identity"]
        out.append(("Where is the current token?",
                    "Linear decoders (multinomial logistic regression, weight decay chosen on held-out training "
                    "windows, scored on the fixed validation batches) read the token at offset 0 (current) and -1 "
                    "(previous) from each site of the first seed's final checkpoint. Dashed: chance (unigram) and, "
                    "for offset -1, what the current token alone predicts about the previous one.",
                    identity_accuracy({n: v["identity"] for n, v in ident.items()}, (0, -1))))
        out.append(("Logit lens", logit_lens_ce({n: v["logit_lens"] for n, v in ident.items()},
                                                {"unigram": results["reference_levels"]["unigram"],
                                                 "bigram": results["reference_levels"]["bigram"]})))
    return out + attention_figures(results, ctx.corpus)


def attention_figures(results: dict[str, Any], corpus, prompt: str = PROMPT) -> list:
    """Attention patterns of the first seed of every variant that has one, at the first and last layer."""
    import torch

    from interp.model import ResidualGPT
    from interp.plots import attention_patterns

    figures = []
    for run in results["runs"]:
        if run["alpha_tt"] is None or run["seed"] != results["seeds"][0]:
            continue
        model = ResidualGPT.from_checkpoint(Path(run["run_dir"]) / "ckpt.pt").eval()
        try:
            ids = corpus.encode(prompt)[: model.cfg.n_ctx]
        except DataError:  # a corpus without the prompt's characters: its own first validation tokens
            ids = [int(i) for i in corpus.val[: min(len(prompt), model.cfg.n_ctx)]]
        tokens = [corpus.decode([i]) for i in ids]
        with torch.no_grad():
            _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda n: n.endswith("hook_pattern"))
        for layer in sorted({0, model.cfg.n_layers - 1}):
            fig = attention_patterns(cache, tokens, layer, title=f"{run['variant']}: layer {layer}")
            figures.append((f"Attention patterns, {run['variant']}, layer {layer}", fig))
    return figures


EXPERIMENT = Experiment(
    name="routing_test", schema=SCHEMA, doc=__doc__, title="Routing test", plan=plan, analyse=analyse, table=table,
    summary=summary, sections=sections, add_arguments=add_arguments, check=check, variants_option=True,
    owned={"residual": "--variants", "mixer": "--variants", "self_bias": "--variants / --self-bias"},
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
