"""python -m experiments.eval_noise: how much random validation batches move "val loss" and "best val".

The paper blames its first, collapsed AttnOnly result partly on nanoGPT's evaluation, which draws fresh random
validation batches at every evaluation. This trains (or reuses) one run of the preset (--config, default
attn_only) and keeps a copy of the weights at --snapshots evenly spaced evaluation steps (a trainer callback
writes <run_dir>/snapshots/step<k>.pt; the trainer itself keeps only its latest ckpt.pt). For every snapshot:

    fixed    the val loss on the fixed validation batches (seed 99991), evaluated twice: the difference is 0
    random   --repeats evaluations on eval_batches fresh random batches each, as nanoGPT evaluates (repeat r,
             snapshot i draws from a generator seeded 2024 + 10000 r + i): mean, std, range

and "best val": the snapshot step with the lowest fixed-batch loss against, for each repeat, the step with the
lowest random-batch loss; reported is the fraction of repeats that pick a different step.

The same is done for a second run in the nanoGPT setting of the paper's first observation (untied embeddings,
random validation batches during training, constant learning rate, no warmup): for --preset paper-10m it is the
real nanogpt-10m preset (runs under <out>/nanogpt-10m/); for nanogpt-10m it is paper-10m; for any other preset it
is the same preset with those differences as overrides (tie_embeddings=false, val_mode=random,
lr_schedule=constant, min_lr=lr, warmup_steps=0), variant "<config> nanogpt". Both runs' best val is reported under
fixed and under random evaluation.

Every run evaluates from step 0 (eval_from = 0, whatever the preset's; --set eval_from=F overrides it): which
step is "best" is a question about the whole run.

A finished run directory without snapshots (trained by another experiment) is refused: delete it or use another
--out.

results.json schema ("eval-noise/1"):
    schema, experiment   "eval-noise/1", "eval_noise"
    preset, seeds, residual_config, repeats, snapshot_count, random_seed_base
    config               {"model", "train"} of the preset with --set overrides, "overrides",
                         "comparison" {"preset", "variant", "overrides"}: how the nanoGPT-setting run was made
    reference_levels     {"unigram", "bigram", ...} on the fixed validation batches (train-split counts)
    runs                 one per (setting, seed): setting ("preset" | "nanogpt"), preset, config, variant, seed,
                         run_dir, val_mode, lr_schedule, tie_embeddings, final_val_loss, best_val_loss, best_step
                         (as recorded in training, under the run's own val_mode), steps, wall_time_s, tokens_per_s,
                         val_curve {steps, loss}, train_curve {steps, loss},
                         snapshots [{step, fixed, fixed_repeat_diff, random {mean, std, min, max, n},
                         random_losses [one per repeat]}],
                         fixed_matches_training (|fixed - training eval| at the last step, fixed-mode runs; else null),
                         best {fixed_step, fixed_loss, random_steps [per repeat], random_loss {mean, std, min, max, n},
                         fraction_different, max_fixed_repeat_diff}
    summary              setting -> {best_fixed (stats over seeds of the fixed-batch best), best_random_mean,
                         fraction_different (mean over seeds), random_std_mean (mean over snapshots and seeds)}
    software             library versions; train_wall_time_s, eval_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.eval_noise.snapshots import SnapshotCallback, load_snapshot, snapshot_identity, snapshot_steps
from experiments.runner.frame import Context, Experiment, Group, Variant, check_number, run_summary
from experiments.runner.text import fmt_number, format_table, reference_lines, seed_curves, table_figure
from experiments.statistics.stats import stats
from interp.command.cli import default_option
from interp.command.progress import progress_bar
from interp.config.model_config import RESIDUALS
from interp.errors import ToolkitError
from training.presets import RunSpec, resolve
from training.rundir import RunDir

SCHEMA = "eval-noise/1"
DEFAULT_CONFIG = "attn_only"
DEFAULT_REPEATS = 20
DEFAULT_SNAPSHOTS = 5
RANDOM_SEED_BASE = 2024
# The paper's 10M figures for the two settings (nanoGPT: its first, joint-collapse observation, seed 1337).
PAPER = {
    "paper-10m": {
        "full": "1.502",
        "attn_only": "1.580 +/- 0.003 (8 seeds)",
        "ffn_only": "3.350 +/- 0.002",
        "none": "3.356",
    },
    "nanogpt-10m": {"attn_only": "~3.35 (collapsed)", "ffn_only": "~3.35 (collapsed)", "none": "~3.35"},
}


def nanogpt_overrides(spec: RunSpec) -> dict[str, Any]:
    """The nanogpt-10m preset's differences from paper-10m, as overrides of any preset."""
    return {
        "tie_embeddings": False,
        "val_mode": "random",
        "lr_schedule": "constant",
        "min_lr": spec.train.lr,
        "warmup_steps": 0,
    }


def analyse_run(run: RunDir, spec: RunSpec, corpus, steps: list[int], repeats: int, progress: bool) -> dict:
    """Fixed-batch and random-batch evaluation of every snapshot of one run, and the best-val choice."""
    import torch

    from training.batches import fixed_batches, random_batches
    from training.numerics import autocast_context, pick_device
    from training.trainer import mean_loss

    if missing := [s for s in steps if not run.snapshot(s).is_file()]:
        raise ToolkitError(
            f"{run.path} has no snapshots for steps {missing} (finished by another experiment, or "
            "trained with other settings); delete that run directory or choose another --out"
        )
    train = spec.train
    device = pick_device(train.device)
    autocast = autocast_context(train.dtype, device)
    n_ctx = spec.model.n_ctx
    fixed = fixed_batches(corpus.val, n_ctx, train.batch_size, train.eval_batches)
    from interp.files.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run.ckpt)  # once, not per snapshot
    own, sealed = snapshot_identity(ckpt), ckpt.state.get("sealed_files") or {}
    snapshots = []
    total, desc = len(steps) * (repeats + 2), f"evaluating {run.path.parent.name}"
    bar = progress_bar(total=total, desc=desc, unit="eval", on=progress)
    for i, step in enumerate(steps):
        model = load_snapshot(run, step, own, sealed).to(device)
        first = mean_loss(model, fixed, device, autocast)
        second = mean_loss(model, fixed, device, autocast)
        bar.update(2)
        losses = []
        for r in range(repeats):
            gen = torch.Generator().manual_seed(RANDOM_SEED_BASE + 10_000 * r + i)
            batches = random_batches(corpus.val, n_ctx, train.batch_size, train.eval_batches, gen)
            losses.append(mean_loss(model, batches, device, autocast))
            bar.update(1)
        snapshots.append(
            {
                "step": step,
                "fixed": first,
                "fixed_repeat_diff": second - first,
                "random": stats(losses),
                "random_losses": losses,
            }
        )
    bar.close()
    fixed_best = min(snapshots, key=lambda s: s["fixed"])
    random_steps = [min(snapshots, key=lambda s: s["random_losses"][r])["step"] for r in range(repeats)]
    random_best = [min(s["random_losses"][r] for s in snapshots) for r in range(repeats)]
    return {
        "snapshots": snapshots,
        "best": {
            "fixed_step": fixed_best["step"],
            "fixed_loss": fixed_best["fixed"],
            "random_steps": random_steps,
            "random_loss": stats(random_best),
            "fraction_different": sum(s != fixed_best["step"] for s in random_steps) / repeats,
            "max_fixed_repeat_diff": max(abs(s["fixed_repeat_diff"]) for s in snapshots),
        },
    }


def comparison(spec: RunSpec, config: str) -> tuple[RunSpec, Variant]:
    """The nanoGPT-setting run beside the preset's (see the module docstring)."""
    if partner := {"paper-10m": "nanogpt-10m", "nanogpt-10m": "paper-10m"}.get(spec.preset):
        return resolve(partner, spec.overrides), Variant(config, {"residual": config})  # resolve copies overrides
    return spec, Variant(f"{config} nanogpt", {"residual": config, **nanogpt_overrides(spec)})


def snapshot_table(run: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["step", "fixed", "fixed twice: diff", "random mean", "random std", "random range", "fixed - random mean"]
    rows = [
        [
            str(s["step"]),
            fmt_number(s["fixed"]),
            f"{s['fixed_repeat_diff']:.1e}",
            fmt_number(s["random"]["mean"]),
            fmt_number(s["random"]["std"]),
            f"[{fmt_number(s['random']['min'])}, {fmt_number(s['random']['max'])}]",
            fmt_number(s["fixed"] - s["random"]["mean"], "+.4f"),
        ]
        for s in run["snapshots"]
    ]
    return headers, rows


def best_table(runs: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["setting", "preset", "seed", "trained with", "training best (step)", "fixed best (step)"]
    headers += ["random best: mean +/- std [range]", "random argmin != fixed"]
    with_paper = any(r["preset"] in PAPER for r in runs)
    if with_paper:
        headers.append("paper")
    rows = []
    for r in runs:
        b = r["best"]
        rl = b["random_loss"]
        rows.append(
            [
                r["setting"],
                r["preset"],
                str(r["seed"]),
                f"{r['val_mode']} val, {r['lr_schedule']} lr, {'tied' if r['tie_embeddings'] else 'untied'}",
                f"{fmt_number(r['best_val_loss'])} ({r['best_step']})",
                f"{fmt_number(b['fixed_loss'])} ({b['fixed_step']})",
                f"{fmt_number(rl['mean'])} +/- {fmt_number(rl['std'])} "
                f"[{fmt_number(rl['min'])}, {fmt_number(rl['max'])}]",
                f"{b['fraction_different']:.0%}",
            ]
        )
        if with_paper:
            rows[-1].append(PAPER.get(r["preset"], {}).get(r["config"], "-"))
    return headers, rows


def sections(results: dict[str, Any], ctx: Context) -> list:
    import plotly.graph_objects as go

    from interp.figures.plots import PALETTE, loss_curves

    refs = reference_lines(results["reference_levels"])
    runs = results["runs"]
    intro = (
        f"Preset {results['preset']}, config {results['residual_config']}, seeds {results['seeds']}; "
        f"{results['repeats']} random-batch evaluations per snapshot (fresh batches each time, as nanoGPT "
        f"evaluates), against the fixed validation batches (seed 99991). The fixed-batch "
        f"loss evaluated twice differs by at most {max(r['best']['max_fixed_repeat_diff'] for r in runs):.1e}."
    )
    sections: list = [intro]
    for r in runs:
        fig = go.Figure()
        for i, s in enumerate(r["snapshots"]):
            fig.add_box(
                x=[f"step {s['step']}"] * len(s["random_losses"]),
                y=s["random_losses"],
                name=f"random batches ({results['repeats']} draws)",
                boxpoints="all",
                jitter=0.4,
                marker=dict(color=PALETTE[0], size=4),
                line=dict(color=PALETTE[0]),
                showlegend=i == 0,
                legendgroup="random",
                offsetgroup="random",
            )
        fig.add_scatter(
            x=[f"step {s['step']}" for s in r["snapshots"]],
            y=[s["fixed"] for s in r["snapshots"]],
            mode="markers+lines",
            name="fixed batches",
            marker=dict(color=PALETTE[1], size=10, symbol="diamond"),
        )
        run_name = f"{r['setting']} run ({r['preset']}, {r['variant']}, seed {r['seed']})"
        title = f"{run_name}: random-batch val loss per snapshot vs fixed"
        fig.update_layout(title=title, yaxis_title="val loss (nats)", showlegend=True)
        headers, rows = snapshot_table(r)
        b = r["best"]
        text = (
            f"Fixed batches pick step {b['fixed_step']} as best; the random-batch argmin differs in "
            f"{b['fraction_different']:.0%} of {results['repeats']} repeats (steps picked: {b['random_steps']})."
        )
        sections += [(f"Snapshots, {r['setting']} run, seed {r['seed']}", text, fig), table_figure(headers, rows)]
    curves = seed_curves(runs, name=lambda r: r["setting"])
    recorded = loss_curves(curves, refs, title="Validation loss as recorded in training")
    sections.append(("Validation loss during training (each run's own val_mode)", recorded))
    return sections


def add_arguments(p) -> None:
    default_option(p, "--config", DEFAULT_CONFIG, "residual config")
    default_option(p, "--repeats", DEFAULT_REPEATS, "random-batch evaluations per snapshot")
    default_option(p, "--snapshots", DEFAULT_SNAPSHOTS, "evaluation steps at which weights are kept")
    p.add_argument("--no-comparison", action="store_true", help="skip the nanoGPT-setting run")


def check(args) -> None:
    if args.config not in RESIDUALS:
        raise ToolkitError(f"--config must be one of {', '.join(RESIDUALS)}, got {args.config!r}")
    check_number("--repeats", args.repeats, 2)
    check_number("--snapshots", args.snapshots, 2)


def settings(ctx: Context) -> list[tuple[str, RunSpec, Variant]]:
    """(setting, spec, variant): the preset's run and, unless --no-comparison, the nanoGPT-setting one."""
    out = [("preset", ctx.spec, Variant(ctx.args.config, {"residual": ctx.args.config}))]
    if not ctx.args.no_comparison:
        out.append(("nanogpt", *comparison(ctx.spec, ctx.args.config)))
    return out


def _snapshots(spec: RunSpec, variant: Variant, count: int) -> list[int]:
    return snapshot_steps(spec.with_overrides(variant.overrides).train, count)


def _without_weights(args) -> dict[str, str]:
    """--analyse-only: every number here is the snapshots' weights evaluated again; nothing is left without them."""
    raise ToolkitError(
        "eval_noise evaluates the runs' weight snapshots: not recomputable without checkpoints (--analyse-only)"
    )


def plan(ctx: Context) -> list[Group]:
    count = ctx.args.snapshots
    return [
        Group(s, [v], callbacks=lambda v, seed, s=s: [SnapshotCallback(_snapshots(s, v, count))])
        for _, s, v in settings(ctx)
    ]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    import time

    args = ctx.args
    plan_of = {(s.preset, v.name): (setting, s, v) for setting, s, v in settings(ctx)}
    runs = []
    eval_start = time.perf_counter()
    for record in records:
        setting, s, variant = plan_of[(record["preset"], record["variant"])]
        resolved = s.with_overrides(variant.overrides)
        base = run_summary(record)
        steps = _snapshots(s, variant, args.snapshots)
        analysis = analyse_run(RunDir(Path(record["run_dir"])), resolved, ctx.corpus, steps, args.repeats, ctx.progress)
        last = analysis["snapshots"][-1]
        at_training_end = resolved.train.val_mode == "fixed" and last["step"] == base["steps"]
        matches = abs(last["fixed"] - base["final_val_loss"]) if at_training_end else None
        runs.append(
            {
                "setting": setting,
                "preset": s.preset,
                "config": args.config,
                **base,
                "val_mode": resolved.train.val_mode,
                "lr_schedule": resolved.train.lr_schedule,
                "tie_embeddings": resolved.model.tie_embeddings,
                **analysis,
                "fixed_matches_training": matches,
            }
        )
    summary = {}
    for setting, *_ in settings(ctx):
        rs = [r for r in runs if r["setting"] == setting]
        summary[setting] = {
            "best_fixed": stats([r["best"]["fixed_loss"] for r in rs]),
            "best_random_mean": stats([r["best"]["random_loss"]["mean"] for r in rs])["mean"],
            "fraction_different": stats([r["best"]["fraction_different"] for r in rs])["mean"],
            "random_std_mean": stats([s["random"]["std"] for r in rs for s in r["snapshots"]])["mean"],
        }
    made = None  # how the nanoGPT-setting run was made
    if not args.no_comparison:
        _, spec, variant = settings(ctx)[1]
        made = {"preset": spec.preset, "variant": variant.name, "overrides": {**spec.overrides, **variant.overrides}}
    return {
        "residual_config": args.config,
        "repeats": args.repeats,
        "snapshot_count": args.snapshots,
        "random_seed_base": RANDOM_SEED_BASE,
        "config": {"comparison": made},
        "runs": runs,
        "summary": summary,
        "eval_wall_time_s": time.perf_counter() - eval_start,
    }


def summary(results: dict[str, Any]) -> str:
    lines = []
    for r in results["runs"]:
        lines.append(
            f"\n{r['setting']} run: {r['preset']} / {r['variant']} / seed {r['seed']} "
            f"({r['val_mode']} val in training, {r['lr_schedule']} lr)"
        )
        lines.append(format_table(*snapshot_table(r)))
        if r["fixed_matches_training"] is not None:
            lines.append(
                f"fixed-batch loss at step {r['snapshots'][-1]['step']} vs the training evaluation: "
                f"|diff| = {r['fixed_matches_training']:.1e}"
            )
    worst = max(r["best"]["max_fixed_repeat_diff"] for r in results["runs"])
    lines.append(
        f"fixed batches evaluated twice: max |diff| = {worst:.1e} (identical batches, deterministic "
        f"evaluation); random: {results['repeats']} draws of {results['config']['train']['eval_batches']} "
        "batches per snapshot"
    )
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="eval_noise",
    schema=SCHEMA,
    doc=__doc__,
    title="Evaluation noise",
    plan=plan,
    analyse=analyse,
    table=lambda results: best_table(results["runs"]),
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    owned={"residual": "--config"},
    defaults=lambda spec: {"eval_from": 0.0},  # snapshots and "best val" span the whole run
    without_weights=_without_weights,
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
