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

results.json schema ("routing-test/1"):
    schema, experiment, preset, seeds, margin, self_bias   what was run and the decision margin (nats)
    config          {"model", "train"} of the preset (before per-variant overrides), variants: name -> overrides
    reference_levels {"unigram", "bigram", "n_targets", ...} on the fixed validation batches
    runs            one per (variant, seed): variant, seed, run_dir, final_val_loss, best_val_loss, best_step,
                    steps, wall_time_s, tokens_per_s, mfu, val_curve / train_curve {steps, loss},
                    alpha_tt [layer][head] (final),
                    alpha_tt_layer_mean, uniform_baseline, block0_grad {steps, norm}, resid_grad {steps, norms},
                    grad_flow {steps, attn, mlp} ([step][layer]), norms {sites, norms}, growth
    variants        name -> {final_val_loss: {mean, std, min, max, n}, place, alpha_tt_layer_mean,
                    block0_grad_at {step: norm}, growth}
    verdicts        list of {id, title, prediction, measured, verdict, separation, rule}
    software        versions; wall_time_s (this invocation), train_wall_time_s (sum over runs); created
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from experiments.common import (
    Variant,
    base_parser,
    cli,
    fmt_stats,
    parse_seeds,
    reference_levels,
    run_grid,
    run_summary,
    software_versions,
    spec_from_args,
    stats,
    write_results,
)
from interp.errors import ToolkitError

SCHEMA = "routing-test/1"
DEFAULT_SELF_BIAS = 4.0
DEFAULT_MARGIN = 0.05  # nats: "at a level" means within this of it
PROMPT = "ROMEO:\nWhat light through yonder window breaks?"


def make_variants(self_bias: float = DEFAULT_SELF_BIAS) -> list[Variant]:
    return [
        Variant("full", {"residual": "full"}),
        Variant("attn_only", {"residual": "attn_only"}),
        Variant("ffn_only", {"residual": "ffn_only"}),
        Variant("none", {"residual": "none"}),
        Variant("attn_only + position_blind", {"residual": "attn_only", "mixer": "position_blind"}),
        Variant("attn_only + uniform", {"residual": "attn_only", "mixer": "uniform"}),
        Variant("attn_only + no_self", {"residual": "attn_only", "self_bias": -math.inf}),
        Variant("ffn_only + self_only", {"residual": "ffn_only", "self_bias": math.inf}),
        Variant("ffn_only + self_bias", {"residual": "ffn_only", "self_bias": self_bias}),
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
    }


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
        growths = [r["growth"] for r in rs if r["growth"] is not None]
        out[name] = {
            "final_val_loss": loss,
            "place": place(loss["mean"], levels, None if name == "full" else full_mean, margin),
            "alpha_tt_layer_mean": [sum(col) / len(col) for col in zip(*alphas, strict=True)] if alphas else None,
            "uniform_baseline": rs[0]["uniform_baseline"],
            "block0_grad_at": block0_at(rs, [0, 100, 300]),
            "growth": sum(growths) / len(growths) if growths else None,
        }
    return out


# ----- verdicts -----------------------------------------------------------------------------


def _sep(a: dict[str, float], b: float | dict[str, float]) -> str:
    """Separation of mean a from b in nats, and in seed standard deviations where there are >= 2 seeds."""
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


def verdicts(variants: dict[str, Any], levels: dict[str, float], margin: float) -> list[dict[str, str]]:
    U, B = levels["unigram"], levels["bigram"]
    m = margin

    def loss(name):
        return variants[name]["final_val_loss"] if name in variants else None

    out = []

    def add(id_, title, prediction, rule, needed, decide):
        if not all(n in variants for n in needed):
            out.append(dict(id=id_, title=title, prediction=prediction, rule=rule, measured="not run",
                            verdict="inconclusive", separation="n/a (variant not in --variants)"))
            return
        measured, verdict, separation = decide()
        out.append(dict(id=id_, title=title, prediction=prediction, rule=rule, measured=measured,
                        verdict=verdict, separation=separation))

    def p1():
        f, a = loss("ffn_only"), loss("attn_only")
        at_floor = f["mean"] >= U - m
        recovers = a["mean"] < B - m
        measured = f"ffn_only {f['mean']:.3f}, attn_only {a['mean']:.3f} (floor {U:.3f}, bigram {B:.3f})"
        verdict = "supports" if at_floor and recovers else ("contradicts" if not at_floor or a["mean"] >= U - m
                                                             else "inconclusive")
        return measured, verdict, f"attn_only - ffn_only: {_sep(a, f)}"

    add("P1", "asymmetry", "ffn_only sits at the unigram floor; attn_only far below it (below bigram)",
        f"supports if ffn_only >= floor - {m} and attn_only < bigram - {m}", ["ffn_only", "attn_only"], p1)

    def p2():
        alpha = variants["attn_only"]["alpha_tt_layer_mean"]
        base = variants["attn_only"]["uniform_baseline"]
        full_alpha = variants.get("full", {}).get("alpha_tt_layer_mean")
        mean_alpha = sum(alpha) / len(alpha)
        measured = (f"attn_only alpha_tt per layer {', '.join(f'{a:.2f}' for a in alpha)} (mean {mean_alpha:.2f}; "
                    f"uniform baseline {base:.3f}, so {mean_alpha / base:.1f}x uniform)")
        if full_alpha:
            measured += f"; full: {', '.join(f'{a:.2f}' for a in full_alpha)}"
        verdict = "supports" if mean_alpha >= 0.8 else ("contradicts" if max(alpha) < 0.5 else "inconclusive")
        return measured, verdict, f"mean alpha_tt {mean_alpha:.2f} vs 1 (near 1: >= 0.8)"

    add("P2", "mechanism", "attn_only's attention puts alpha_tt near 1 on the current token",
        "supports if the layer-mean alpha_tt >= 0.8; contradicts if every layer < 0.5", ["attn_only"], p2)

    def p3():
        p = loss("attn_only + position_blind")
        paper_rule = "supports" if p["mean"] > 3.20 else ("refutes" if p["mean"] < 1.75 else "undecided")
        if p["mean"] >= U - m:
            verdict, reading = "supports", "at the floor: without attention not even the current token gets through"
        elif abs(p["mean"] - B) <= m:
            verdict = "inconclusive"
            reading = "at the bigram level: exactly what any pointwise mixer can reach, so it measures 'no context'"
        elif p["mean"] < B - m:
            verdict, reading = "contradicts", "below bigram: a pointwise mixer cannot do that unless context leaks"
        else:
            verdict, reading = "inconclusive", "between bigram and floor"
        measured = f"{p['mean']:.3f}; paper's rule (>3.20 supports, <1.75 refutes): {paper_rule}; {reading}"
        return measured, verdict, f"vs bigram: {_sep(p, B)}; vs floor: {_sep(p, U)}"

    add("P3", "the paper's mixer test", "a position-blind mixer in attn_only collapses to the floor",
        f"read against the bigram level (+/- {m}); at bigram = inconclusive (no context, not no routing)",
        ["attn_only + position_blind"], p3)

    def p4():
        n, a = loss("attn_only + no_self"), loss("attn_only")
        lost = n["mean"] >= B - m
        kept = n["mean"] <= a["mean"] + max(m, 3 * max(n["std"], a["std"]))
        verdict = "supports" if lost else ("contradicts" if kept else "inconclusive")
        measured = f"attn_only + no_self {n['mean']:.3f} vs attn_only {a['mean']:.3f} (bigram {B:.3f})"
        return measured, verdict, f"no_self - attn_only: {_sep(n, a)}"

    add("P4", "attn_only needs alpha_tt", "forbidding the self path (alpha_tt = 0) loses attn_only's recovery",
        f"supports if no_self >= bigram - {m}; contradicts if it stays within max({m}, 3 std) of attn_only",
        ["attn_only + no_self", "attn_only"], p4)

    def p5():
        s = loss("ffn_only + self_only")
        if abs(s["mean"] - B) <= m or (B < s["mean"] < U - m):
            verdict = "supports" if abs(s["mean"] - B) <= m else "inconclusive"
        else:
            verdict = "contradicts" if s["mean"] >= U - m else "inconclusive"
        measured = f"ffn_only + self_only {s['mean']:.3f} (bigram {B:.3f}, floor {U:.3f})"
        return measured, verdict, f"vs bigram: {_sep(s, B)}; vs floor: {_sep(s, U)}"

    add("P5", "identity restores the current token", "ffn_only + self_only reaches the bigram level, not the floor",
        f"supports if within {m} of bigram; contradicts if >= floor - {m}", ["ffn_only + self_only"], p5)

    def p6():
        s = loss("ffn_only + self_bias")
        verdict = "supports" if s["mean"] < B - m else ("contradicts" if s["mean"] >= B - m else "inconclusive")
        measured = f"ffn_only + self_bias {s['mean']:.3f} (bigram {B:.3f})"
        return measured, verdict, f"vs bigram: {_sep(s, B)}"

    add("P6", "ffn_only's collapse is an early-training trap",
        "with a self-focused start that can still read context, ffn_only goes below the bigram level",
        f"supports if < bigram - {m}; contradicts otherwise", ["ffn_only + self_bias"], p6)

    def p7():
        u, a = loss("attn_only + uniform"), loss("attn_only")
        between = a["mean"] + m < u["mean"] < B - m
        if between:
            verdict = "supports"
            frac = (B - u["mean"]) / (B - a["mean"]) if B != a["mean"] else float("nan")
            where = f"recovers {frac:.0%} of the way from bigram to attn_only"
        elif u["mean"] <= a["mean"] + m:
            verdict, where = "contradicts", "as good as (or better than) attn_only: content-based routing is not needed"
        else:
            verdict, where = "contradicts", "no better than bigram: averaging gives nothing"
        measured = f"attn_only + uniform {u['mean']:.3f} (attn_only {a['mean']:.3f}, bigram {B:.3f}); {where}"
        return measured, verdict, f"vs attn_only: {_sep(u, a)}; vs bigram: {_sep(u, B)}"

    add("P7", "routing needs content", "attn_only + uniform sits between the bigram level and attn_only",
        f"supports if attn_only + {m} < uniform < bigram - {m}", ["attn_only + uniform", "attn_only"], p7)
    return out


# ----- output -------------------------------------------------------------------------------


def console_table(variants: dict[str, Any], levels: dict[str, float], margin: float) -> str:
    lines = [
        f"reference levels (fixed validation batches, train-split counts): unigram {levels['unigram']:.3f}, "
        f"bigram {levels['bigram']:.3f} nats",
        f"place rule (margin {margin} nats): floor if loss >= unigram - m; bigram if |loss - bigram| <= m; "
        "near full if <= full + m; else below bigram (uses context) or between bigram and floor",
        "",
        f"{'variant':28s} {'final val loss':30s} {'place':28s} {'alpha_tt/layer (uniform)':28s} "
        f"{'block-0 grad 0/100/300/end':34s} growth",
    ]
    for name, v in variants.items():
        alpha = v["alpha_tt_layer_mean"]
        alpha_s = (" ".join(f"{a:.2f}" for a in alpha) + f" ({v['uniform_baseline']:.3f})") if alpha else "n/a"
        grads = " / ".join(f"{g:.3g}" for g in v["block0_grad_at"].values())
        growth = f"{v['growth']:.2f}x" if v["growth"] is not None else "n/a"
        lines.append(f"{name:28s} {fmt_stats(v['final_val_loss']):30s} {v['place']:28s} {alpha_s:28s} "
                     f"{grads:34s} {growth}")
    return "\n".join(lines)


def console_verdicts(items: list[dict[str, str]]) -> str:
    lines = []
    for v in items:
        lines.append(f"{v['id']} {v['title']}: {v['verdict'].upper()}")
        lines.append(f"   predicted: {v['prediction']}")
        lines.append(f"   measured:  {v['measured']}")
        lines.append(f"   separation: {v['separation']}   [rule: {v['rule']}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(
        "python -m experiments.routing_test",
        __doc__.split("results.json schema")[0],
        default_out="runs/routing_test",
    )
    parser.add_argument("--variants", help="comma-separated subset of the variant names (default: all nine)")
    parser.add_argument("--self-bias", type=float, default=DEFAULT_SELF_BIAS,
                        help=f"the finite self-score bias of 'ffn_only + self_bias' (default {DEFAULT_SELF_BIAS})")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help=f"nats within which a loss counts as at a level (default {DEFAULT_MARGIN})")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    spec = spec_from_args(args)
    seeds = parse_seeds(args.seeds, [spec.train.seed])
    variants = make_variants(args.self_bias)
    if args.variants:
        wanted = [w.strip() for w in args.variants.split(",") if w.strip()]
        known = {v.name: v for v in variants}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ToolkitError(f"unknown variant(s) {unknown}; choose from: {', '.join(known)}")
        variants = [known[w] for w in wanted]
    from training.data import load_corpus

    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    levels = reference_levels(spec, corpus)
    out = Path(args.out)
    print(f"routing test: preset {spec.preset}, seeds {seeds}, {len(variants)} variants -> {out / spec.preset}")
    records = run_grid(spec, variants, seeds, out, progress=not args.no_progress, corpus=corpus)
    runs = [summarise_run(r) for r in records]
    summary = summarise_variants(runs, levels, args.margin)
    items = verdicts(summary, levels, args.margin)
    results = {
        "schema": SCHEMA,
        "experiment": "routing_test",
        "preset": spec.preset,
        "seeds": seeds,
        "margin": args.margin,
        "self_bias": args.self_bias,
        "config": {"model": spec.model.to_dict(), "train": spec.train.to_dict(),
                   "variants": {v.name: v.overrides for v in variants}},
        "reference_levels": levels,
        "runs": runs,
        "variants": summary,
        "verdicts": items,
        "software": software_versions(),
        "train_wall_time_s": sum(r["wall_time_s"] for r in runs),
    }
    results["wall_time_s"] = time.perf_counter() - start
    result_dir = out / spec.preset
    write_results(result_dir / "results.json", results)
    print()
    print(console_table(summary, levels, args.margin))
    print()
    print(console_verdicts(items))
    if not args.no_report:
        from experiments.routing_report import write_report

        write_report(result_dir / "report.html", results, corpus, PROMPT)
        print(f"\nreport: {result_dir / 'report.html'}")
    print(f"results: {result_dir / 'results.json'}  (wall time {time.perf_counter() - start:.0f}s)")
    return 0


run = cli(main)

if __name__ == "__main__":
    raise SystemExit(run())
