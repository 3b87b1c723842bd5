"""python -m experiments.interventions: causal interventions inside the routing test's trained models.

The routing test trains variants; this opens each trained model and, one layer at a time, removes
or replaces one path at inference on the fixed validation batches (interp.reading.interventions: every
intervention is a list of TransformerLens hooks, so it runs the same on the export):

    remove_attn_residual   resid_mid := attn_out         remove_ffn_residual   resid_post := mlp_out
    knock_out_self         the pattern's self weight removed, rows renormalised (self score -inf)
    self_only              every query reads only itself: the position-blind read of the routing controls
    uniform_pattern        causal uniform weights (the uniform control)
    zero_head, mean_head   one head's hook_z set to 0 / to its mean over the validation batches
    patching               previous-token activation patching at position T (--patch-pos): the token at
                           T-1 resampled, clean activations at T patched into the corrupted run per layer
                           (attn_out, resid_post) and per head (hook_z); fraction of the loss gap restored

It trains nothing of its own: it plans exactly the routing test's runs (same --preset, --seeds,
--variants, --set, --self-bias and run directories under --out, by default the routing test's
runs/routing_test), so finished routing-test runs are reused and missing ones are trained as the
routing test trains them; how many are missing, and what training them costs, is printed first.

Every effect is a change in validation loss (nats, per-sequence means, intervened - clean) with a 95%
percentile bootstrap interval over validation sequences (seeded); a variant's effect is the mean over
its seeds (they share the sequences). Identity probes (probes.decoders.fit_decoders: fitted once on
the clean model at each layer's resid_post, offsets 0 and -1) score the site after the intervened layer:
the change in current- and previous-token decoder cross-entropy. Losses are placed against the
unigram and bigram levels (the routing test's place rule). The predictions I1-I8
(experiments.interventions.rules) were fixed from the hypothesis before any number; each verdict cites
its interval and which routing-test prediction (P1-P7) it confirms or refines. Sanity checks (no-op
hooks, interventions on paths a model lacks, the patching ends) and the largest difference between
ResidualGPT and its export under the same hooks are reported.

Cost: about (7 + 2 x heads) x layers + 3 forward passes over --val-batches batches per model, plus the
probes. --val-batches (default 2 of the preset's fixed batches; 0: all) bounds it.

results.json schema ("interventions/1"):
    schema, experiment, preset, seeds, config, reference_levels, software, wall_time_s, created   (the frame's)
    margin, self_bias, val_batches, n_sequences, patch_pos, bootstrap {resamples, seed, level},
    identity_probes (whether they ran), train_wall_time_s (the frame's: training this invocation did)
    runs        one per (variant, seed): variant, seed, run_dir, final_val_loss, effects (below),
                wall_time_s (this run's interventions)
    variants    name -> {seeds, effects: the same layout over the seed-mean per-sequence numbers,
                seed_spread {intervention: [layer] std over seeds of the mean change]}}
    effects     clean_loss {mean, lo, hi}, clean_place;
                layers {intervention: [layer] {delta {mean, lo, hi}, loss {mean, lo, hi}, place,
                identity {clean_ce [offset], ce [offset], delta_ce [offset] {mean, lo, hi}}} or null
                where the model lacks the hook};
                heads {zero_head, mean_head: [layer][head] {mean, lo, hi} (change in loss) or null};
                patching {clean_loss, corrupt_loss, gap {mean, lo, hi}, first_resid_pre, sites {attn_out,
                resid_post: [layer]}, heads [layer][head]}: fraction restored {mean, lo, hi} or null (gap ~0);
                no_op_max_abs; probe_levels {offsets, unigram_ce, current_token_ce}: where a decoder's CE for the
                token at each offset sits knowing nothing / knowing only the current token (absent with
                --no-identity)
    verdicts    list of {id, title, prediction, rule, bears_on, relation, verdict, measured, interval}
    sanity      list of {variant, seed, check, value, expected, ok}
    export      variant -> {max_abs_diff, per_intervention, sequences} (first seed; null: no TL export)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from experiments.interventions.report import sections, summary, table
from experiments.routing_test.run import DEFAULT_MARGIN, DEFAULT_SELF_BIAS, make_variants
from experiments.runner.frame import Context, Experiment, Group, Job, check_number, run_summary
from interp.command.cli import default_option
from interp.command.progress import progress_bar
from interp.errors import ToolkitError

SCHEMA = "interventions/1"
DEFAULT_VAL_BATCHES = 2  # cpu-quick: ~70 forward passes a model; 2 batches = 32 sequences of 128 tokens


def add_arguments(p) -> None:
    p.add_argument(
        "--self-bias",
        type=float,
        default=DEFAULT_SELF_BIAS,
        help=f"as the routing test's: the self-score bias of 'ffn_only + self_bias' (default "
        f"{DEFAULT_SELF_BIAS}); pick the routing test's value to reuse its runs",
    )
    default_option(p, "--margin", DEFAULT_MARGIN, "nats: an effect counts when its interval clears this")
    p.add_argument(
        "--val-batches",
        type=int,
        default=DEFAULT_VAL_BATCHES,
        help=f"how many of the preset's fixed validation batches to intervene on (default "
        f"{DEFAULT_VAL_BATCHES}; 0: all); the cost grows linearly with it",
    )
    patch = "position T whose previous token is resampled for patching (default n_ctx // 2)"
    p.add_argument("--patch-pos", type=int, default=None, help=patch)
    p.add_argument("--no-identity", action="store_true", help="skip the identity probes (I8 is then inconclusive)")


def check(args) -> None:
    check_number("--margin", args.margin, 0.0, inclusive=False)
    check_number("--self-bias", args.self_bias, 0.0, inclusive=False)
    if args.val_batches < 0:
        raise ToolkitError(f"--val-batches must be >= 0 (0: all), got {args.val_batches}")


def plan(ctx: Context) -> list[Group]:
    """The routing test's plan, so the run directories (and finished runs) are shared."""
    n_ctx = ctx.spec.model.n_ctx
    if n_ctx < 3:
        raise ToolkitError(f"the interventions need n_ctx >= 3, got --set n_ctx={n_ctx}")
    if ctx.args.val_batches > ctx.spec.train.eval_batches:
        raise ToolkitError(
            f"--val-batches {ctx.args.val_batches} is more than the preset's "
            f"{ctx.spec.train.eval_batches} fixed validation batches (0: all of them)"
        )
    pos = ctx.args.patch_pos
    if pos is not None and not 1 <= pos < n_ctx:
        raise ToolkitError(f"--patch-pos must be in [1, {n_ctx - 1}] (a position with a previous token), got {pos}")
    return [Group(ctx.spec, make_variants(ctx.args.self_bias))]


def validation(ctx: Context) -> list:
    from training.batches import fixed_batches

    spec = ctx.spec
    n = spec.train.eval_batches if ctx.args.val_batches == 0 else min(ctx.args.val_batches, spec.train.eval_batches)
    return fixed_batches(ctx.corpus.val, spec.model.n_ctx, spec.train.batch_size, spec.train.eval_batches)[:n]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np
    import torch

    from experiments.interventions import effects as fx
    from experiments.interventions.rules import intervention_verdicts
    from interp.model.gpt import ResidualGPT
    from probes.decoders import fit_decoders
    from probes.identity import too_costly

    batches = validation(ctx)
    n_seq = sum(len(x) for x, _ in batches)
    patch_pos = ctx.args.patch_pos or ctx.spec.model.n_ctx // 2
    idx = fx.bootstrap_index(n_seq)
    margin, levels = ctx.args.margin, ctx.levels
    counts = np.bincount(np.asarray(ctx.corpus.train), minlength=ctx.spec.model.d_vocab).astype(float)
    unigram = counts / counts.sum()
    identity = not ctx.args.no_identity and too_costly(ctx.spec.model) is None
    if not ctx.args.no_identity and not identity:
        print(f"identity probes skipped: {too_costly(ctx.spec.model)}")

    probe_refs = fx.probe_levels(ctx.corpus.train, batches, ctx.spec.model.d_vocab) if identity else None
    total = sum(fx.n_ticks(_config(r), identity) for r in records)
    bar = progress_bar(total=total, desc="interventions", unit="pass", on=ctx.progress)
    runs, raws, sanity, export = [], {}, [], {}
    for r in records:
        start = time.perf_counter()
        bar.set_postfix_str(f"{r['variant']} seed {r['seed']}")
        model = ResidualGPT.from_checkpoint(Path(r["run_dir"]) / "ckpt.pt")
        sites = [f"blocks.{layer}.hook_resid_post" for layer in range(model.cfg.n_layers)]
        decoders = fit_decoders(model, ctx.corpus.train, sites) if identity else None
        raw = fx.measure_model(
            model, batches, decoders=decoders, patch_pos=patch_pos, unigram=unigram, tick=lambda: bar.update(1)
        )
        raws.setdefault(r["variant"], []).append(raw)
        sanity += [{**c, "seed": r["seed"]} for c in fx.sanity_checks(r["variant"], model.cfg, raw, levels, margin)]
        if r["seed"] == ctx.seeds[0]:
            with torch.no_grad():
                export[r["variant"]] = fx.export_difference(model, batches[0], patch_pos, unigram)
        runs.append(
            {
                **{k: v for k, v in run_summary(r).items() if k in ("variant", "seed", "run_dir", "final_val_loss")},
                "effects": fx.summarise(raw, idx, levels, margin, probe_refs),
                "wall_time_s": time.perf_counter() - start,
            }
        )
    bar.close()
    variants = _variants(records, raws, idx, levels, margin, probe_refs)
    outcomes = {
        n: {**v["effects"], "seed_spread": v["seed_spread"], "n_seeds": len(v["seeds"])} for n, v in variants.items()
    }
    return {
        "margin": margin,
        "self_bias": ctx.args.self_bias,
        "val_batches": len(batches),
        "n_sequences": n_seq,
        "patch_pos": patch_pos,
        "bootstrap": {"resamples": fx.BOOTSTRAP, "seed": fx.BOOTSTRAP_SEED, "level": fx.LEVEL},
        "identity_probes": identity,
        "runs": runs,
        "variants": variants,
        "verdicts": intervention_verdicts(outcomes, levels, margin),
        "sanity": sanity,
        "export": export,
    }


def _variants(records: list[dict[str, Any]], raws: dict[str, list], idx, levels, margin: float, probe_refs) -> dict:
    """Per variant: the effects on its seeds' mean measures, and per intervention and layer their spread over seeds."""
    import numpy as np

    from experiments.interventions import effects as fx

    variants = {}
    for name, rs in raws.items():
        effects = fx.summarise(fx.mean_raw(rs), idx, levels, margin, probe_refs)
        spread = {}
        for iv_name, per_layer in rs[0]["layers"].items():
            if per_layer is not None:
                spread[iv_name] = [
                    float(np.std([(raw["layers"][iv_name][layer] - raw["clean"]).mean() for raw in rs], ddof=1))
                    if len(rs) > 1
                    else 0.0
                    for layer in range(len(per_layer))
                ]
        seeds = [r["seed"] for r in records if r["variant"] == name]
        variants[name] = {"seeds": seeds, "effects": effects, "seed_spread": spread}
    return variants


def preface(ctx: Context, jobs: list[Job]) -> str:
    """Which of the routing test's runs are reused and what training the others costs, before any trains."""
    from experiments.runner.cost import estimate, flops_text, time_here

    todo = [j for j in jobs if not j.run_dir(ctx.out).finished]
    where = f"the routing test's runs in {ctx.result_dir}"
    if not todo:
        return f"{where}: all {len(jobs)} finished, reused; nothing to train"
    line = (
        f"{where}: {len(jobs) - len(todo)} of {len(jobs)} finished and reused; {len(todo)} to train first, as "
        f"`python -m experiments.routing_test` would: {flops_text(estimate(ctx, jobs)['flops_to_train'])}"
    )
    if ctx.args.launcher == "local":
        line += f", {time_here(ctx, jobs)}"
    if ctx.out != Path(ROUTING_OUT):
        line += f"; the routing test's own runs are under --out {ROUTING_OUT} (the default)"
    return line


def _config(record: dict[str, Any]):
    from interp.config.model_config import ModelConfig
    from interp.files.io import read_json

    return ModelConfig.from_dict(read_json(Path(record["run_dir"]) / "config.json")["model"])


ROUTING_OUT = "runs/routing_test"


def _without_weights(args) -> dict[str, str]:
    """--analyse-only: every intervention runs on the trained weights; nothing is left without them."""
    raise ToolkitError(
        "every intervention is measured on the trained weights: not recomputable without checkpoints "
        "(--analyse-only reads the logged runs only)"
    )


class _SharesRoutingOut(Experiment):
    """The frame's Experiment whose default --out is the routing test's, so its finished runs are found."""

    @property
    def default_out(self) -> str:
        return ROUTING_OUT


EXPERIMENT = _SharesRoutingOut(
    name="interventions",
    schema=SCHEMA,
    doc=__doc__,
    title="Interventions",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    preface=preface,
    variants_option=True,
    owned={"residual": "--variants", "mixer": "--variants", "self_bias": "--variants / --self-bias"},
    without_weights=_without_weights,
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
