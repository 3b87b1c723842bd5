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
    identity        variant -> {"identity": probes.identity.measure_identity(...), "logit_lens": {sites, layers,
                    ce}} on the first seed's final checkpoint (null with --no-identity)
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
from pathlib import Path
from typing import Any

from experiments.routing_test.report import sections, summary, table
from experiments.routing_test.rules import place, verdicts
from experiments.runner.frame import Context, Experiment, Group, Job, Variant, check_number, run_summary
from experiments.shared.plan import by_variant
from experiments.statistics.stats import PACE_FACTOR, log_pace, mean_columns, paired_gap, stats, tail
from interp.command.cli import default_option
from interp.command.progress import progress_bar
from interp.errors import ToolkitError

SCHEMA = "routing-test/3"
DEFAULT_SELF_BIAS = 4.0
DEFAULT_MARGIN = 0.05  # nats: "at a level" means within this of it

# Here: the variants, the per-run and per-variant numbers, the experiment. The verdict rules live beside
# their predictions in experiments.routing_test.rules; the console table, summary and report.html sections in
# experiments.routing_test.report; curve and seed statistics in experiments.statistics.stats.


def make_variants(self_bias: float = DEFAULT_SELF_BIAS) -> list[Variant]:
    """The nine variants, named by the rule the trainer CLI uses (training.run_config.variant_name)."""
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
    steps = [g["step"] for g in grads]
    attention = [r for r in probes.get("attention", []) if "alpha_tt" in r]
    last_attn = attention[-1] if attention else {}
    last_norms = (probes.get("norms") or [{}])[-1]
    return {
        **run_summary(record),
        "mfu": final["mfu"],
        "alpha_tt": last_attn.get("alpha_tt"),
        "alpha_tt_layer_mean": last_attn.get("alpha_tt_layer_mean"),
        "uniform_baseline": last_attn.get("uniform_baseline"),
        "attention_skipped": (probes.get("attention") or [{}])[-1].get("skipped"),
        "block0_grad": {"steps": steps, "norm": [math.hypot(g["attn"][0], g["mlp"][0]) for g in grads]},
        "resid_grad": {"steps": steps, "norms": [g["resid"] for g in grads]},
        "grad_flow": {"steps": steps, "attn": [g["attn"] for g in grads], "mlp": [g["mlp"] for g in grads]},
        "norms": {"sites": last_norms.get("sites"), "norms": last_norms.get("norms")},
        "growth": last_norms.get("growth"),
        "tail": tail(record["val_curve"]["steps"], record["val_curve"]["loss"], PACE_FACTOR),
        "alpha_tt_projected": project_alpha(attention),
    }


def project_alpha(attention: list[dict[str, Any]]) -> list[float] | None:
    """Each layer's mean alpha_tt at PACE_FACTOR times the steps, at its pace over the second half."""
    if not attention:
        return None
    steps = [r["step"] for r in attention]
    layers = zip(*[r["alpha_tt_layer_mean"] for r in attention], strict=True)
    return [min(1.0, max(0.0, series[-1] + log_pace(steps, list(series)) * math.log(PACE_FACTOR))) for series in layers]


def block0_at(runs: list[dict[str, Any]], wanted: list[int]) -> dict[str, float]:
    """Mean over seeds of the block-0 gradient norm at the wanted steps (and the last recorded)."""
    grads = [r["block0_grad"] for r in runs]
    vals = {str(step): [g["norm"][g["steps"].index(step)] for g in grads if step in g["steps"]] for step in wanted}
    if ends := [g["norm"][-1] for g in grads if g["norm"]]:
        vals[f"end ({grads[0]['steps'][-1]})"] = ends
    return {key: sum(v) / len(v) for key, v in vals.items() if v}


def summarise_variants(runs: list[dict[str, Any]], levels: dict[str, float], margin: float) -> dict[str, Any]:
    grouped = by_variant(runs)
    full = grouped.get("full")
    full_mean = stats([r["final_val_loss"] for r in full])["mean"] if full else None
    out = {}
    for name, rs in grouped.items():
        loss = stats([r["final_val_loss"] for r in rs])
        growths = [r["growth"] for r in rs if r["growth"] is not None]
        out[name] = {
            "final_val_loss": loss,
            "place": place(loss["mean"], levels, None if name == "full" else full_mean, margin),
            "alpha_tt_layer_mean": mean_columns([r["alpha_tt_layer_mean"] for r in rs if r["alpha_tt_layer_mean"]]),
            "uniform_baseline": rs[0]["uniform_baseline"],
            "block0_grad_at": block0_at(rs, [0, 100, 300]),
            "growth": sum(growths) / len(growths) if growths else None,
            "tail_drop": stats([r["tail"]["drop"] for r in rs]),
            "tail_slope_per_1k": stats([r["tail"]["slope_per_1k"] for r in rs])["mean"],
            "projected_val_loss": stats([r["tail"]["projected"] for r in rs]),
            "alpha_tt_projected": mean_columns([r["alpha_tt_projected"] for r in rs if r.get("alpha_tt_projected")]),
        }
    return out


# ----- the experiment -------------------------------------------------------------------------------------


def add_arguments(p) -> None:
    default_option(p, "--self-bias", DEFAULT_SELF_BIAS, "the finite self-score bias of 'ffn_only + self_bias'")
    default_option(p, "--margin", DEFAULT_MARGIN, "nats within which a loss counts as at a level")
    skip = "skip the token-identity probes and the logit lens on the first seed's checkpoints"
    p.add_argument("--no-identity", action="store_true", help=skip)


def check(args) -> None:
    check_number("--margin", args.margin, 0.0, inclusive=False)
    check_number("--self-bias", args.self_bias, 0.0, inclusive=False)


def plan(ctx: Context) -> list[Group]:
    if ctx.spec.model.n_ctx < 3:  # routing needs context; the identity probes read offsets 0, -1, -2
        raise ToolkitError(f"the routing test needs n_ctx >= 3, got --set n_ctx={ctx.spec.model.n_ctx}")
    return [Group(ctx.spec, make_variants(ctx.args.self_bias))]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [summarise_run(r) for r in records]
    variants = summarise_variants(runs, ctx.levels, ctx.args.margin)
    return {
        "margin": ctx.args.margin,
        "self_bias": ctx.args.self_bias,
        "runs": runs,
        "variants": variants,
        "gaps": {"attn_only - full": paired_gap(runs, "attn_only", "full")},
        "identity": None if ctx.args.no_identity else identity(ctx, runs),
        "verdicts": verdicts(variants, ctx.levels, ctx.args.margin),
    }


def identity(ctx: Context, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Where is the current token? Identity probes and the logit lens on each variant's first-seed checkpoint.

    Computed from the checkpoint every time the results are made, never read from a cache. Earlier versions
    kept them in identity.json, sealed with sha256(checkpoint hash, summary); but anyone can recompute that
    seal, so an edited identity.json with its seal recomputed was read as the result (the routing test's
    numbers, from one file nothing else vouches for). A cache covered by the run's own hash would have to be
    recorded in the checkpoint, which is final (and its hash in final.json) before the probes run. The
    checkpoint is verified by load_checkpoint (its content hash, its fields) before the probes read it; the
    cost is refitting the decoders on every run of the command (seconds for the small presets; a vocabulary
    too large to probe is skipped, probes.identity.too_costly). An identity.json left by an earlier version
    is neither read nor removed.
    """
    from probes.identity import identity_sites, identity_summary, too_costly
    from training.batches import fixed_batches
    from training.rundir import RunDir

    spec = ctx.spec
    if reason := too_costly(spec.model):  # a large vocabulary: the decoders would run for hours with nothing printed
        print(f"identity probes skipped: {reason}; the results hold identity null")
        return None
    first = [r for r in runs if r["seed"] == ctx.seeds[0]]
    out = {}
    total = len(first) * (len(identity_sites(spec.model.n_layers)) + 1)
    bar = progress_bar(total=total, desc="identity probes", unit="site", on=ctx.progress)
    batches = fixed_batches(ctx.corpus.val, spec.model.n_ctx, spec.train.batch_size, spec.train.eval_batches)
    for r in first:
        run = RunDir(Path(r["run_dir"]))
        bar.set_postfix_str(r["variant"])
        out[r["variant"]] = identity_summary(run.ckpt, ctx.corpus.train, batches, progress=lambda _: bar.update(1))
    bar.close()
    return out


def preface(ctx: Context, jobs: list[Job]) -> str:
    """What training the runs costs, printed before any trains (a cpu-quick grid is tens of minutes here)."""
    from experiments.runner.cost import cost_line

    line, e = cost_line(ctx, jobs, timed=True)
    if not e["flops_to_train"]:
        return line + ": every run finished, reused"
    return line


def without_weights(args) -> dict[str, str]:
    """--analyse-only: the identity probes and the logit lens read the first seed's checkpoints; the rest is logs."""
    if args.no_identity:
        return {}
    args.no_identity = True  # identity is null in the results, and not_recomputed says why
    return {"identity": "the identity probes and the logit lens read each variant's first-seed checkpoint"}


EXPERIMENT = Experiment(
    name="routing_test",
    schema=SCHEMA,
    doc=__doc__,
    title="Routing test",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    variants_option=True,
    owned={"residual": "--variants", "mixer": "--variants", "self_bias": "--variants / --self-bias"},
    without_weights=without_weights,
    preface=preface,
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
