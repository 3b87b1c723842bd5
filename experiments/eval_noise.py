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

import math
import time
from pathlib import Path
from typing import Any

from experiments.common import (
    Variant,
    base_parser,
    cli,
    format_table,
    levels_line,
    parse_seeds,
    reference_levels,
    reference_lines,
    refuse_overrides,
    run_dir,
    run_grid,
    run_summary,
    software_versions,
    spec_from_args,
    stats,
    table_figure,
    write_results,
)
from interp.config import RESIDUALS
from interp.errors import ToolkitError
from training.presets import RunSpec, resolve

SCHEMA = "eval-noise/1"
DEFAULT_CONFIG = "attn_only"
DEFAULT_REPEATS = 20
DEFAULT_SNAPSHOTS = 5
RANDOM_SEED_BASE = 2024
# The paper's 10M figures for the two settings (nanoGPT: its first, joint-collapse observation, seed 1337).
PAPER = {
    "paper-10m": {"full": "1.502", "attn_only": "1.580 +/- 0.003 (8 seeds)", "ffn_only": "3.350 +/- 0.002",
                  "none": "3.356"},
    "nanogpt-10m": {"attn_only": "~3.35 (collapsed)", "ffn_only": "~3.35 (collapsed)", "none": "~3.35"},
}


def nanogpt_overrides(spec: RunSpec) -> dict[str, Any]:
    """The nanogpt-10m preset's differences from paper-10m, as overrides of any preset."""
    return {"tie_embeddings": False, "val_mode": "random", "lr_schedule": "constant", "min_lr": spec.train.lr,
            "warmup_steps": 0}


def snapshot_steps(max_steps: int, eval_interval: int, count: int) -> list[int]:
    """`count` evenly spaced evaluation steps after step 0, always including the last."""
    evals = sorted({s for s in range(eval_interval, max_steps + 1, eval_interval)} | {max_steps})
    if count >= len(evals):
        return evals
    picks = {evals[int(i * (len(evals) - 1) / (count - 1) + 0.5)] for i in range(count)} if count > 1 else {evals[-1]}
    return sorted(picks)


def snapshot_path(directory: Path, step: int) -> Path:
    return Path(directory) / "snapshots" / f"step{step}.pt"


class SnapshotCallback:
    """Keep a copy of the model weights at the given evaluation steps (interp checkpoint, written atomically)."""

    def __init__(self, steps: list[int]):
        self.steps = set(steps)

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if step in self.steps and trainer.is_main:
            from interp.checkpoint import save_checkpoint

            save_checkpoint(snapshot_path(trainer.run_dir, step), trainer.model, step=step, val_loss=val_loss)


def evaluate(model, batches, device, autocast) -> float:
    """Mean cross-entropy over batches in eval mode: the trainer's evaluation, post hoc."""
    import torch

    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            with autocast:
                _, loss = model(x.to(device), y.to(device))
            total += loss.item()
    return total / len(batches)


def analyse_run(directory: Path, spec: RunSpec, corpus, steps: list[int], repeats: int, progress: bool) -> dict:
    """Fixed-batch and random-batch evaluation of every snapshot of one run, and the best-val choice."""
    import contextlib

    import torch
    from tqdm.auto import tqdm

    from interp.checkpoint import load_checkpoint
    from interp.model import ResidualGPT
    from training.data import fixed_batches, random_batches
    from training.trainer import pick_device

    missing = [s for s in steps if not snapshot_path(directory, s).is_file()]
    if missing:
        raise ToolkitError(f"{directory} has no snapshots for steps {missing} (finished by another experiment, or "
                           "trained with other settings); delete that run directory or choose another --out")
    train = spec.train
    device = pick_device(train.device)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if train.dtype == "bfloat16" and device.type == "cuda"
                else contextlib.nullcontext())
    n_ctx = spec.model.n_ctx
    fixed = fixed_batches(corpus.val, n_ctx, train.batch_size, train.eval_batches)
    snapshots = []
    bar = tqdm(total=len(steps) * (repeats + 2), desc=f"evaluating {directory.parent.name}", unit="eval",
               disable=not progress, leave=False, dynamic_ncols=True)
    for i, step in enumerate(steps):
        ckpt = load_checkpoint(snapshot_path(directory, step), map_location="cpu")
        model = ResidualGPT(ckpt.config)
        model.load_state_dict(ckpt.weights)
        model.to(device)
        first = evaluate(model, fixed, device, autocast)
        second = evaluate(model, fixed, device, autocast)
        bar.update(2)
        losses = []
        for r in range(repeats):
            gen = torch.Generator().manual_seed(RANDOM_SEED_BASE + 10_000 * r + i)
            batches = random_batches(corpus.val, n_ctx, train.batch_size, train.eval_batches, gen)
            losses.append(evaluate(model, batches, device, autocast))
            bar.update(1)
        snapshots.append({"step": step, "fixed": first, "fixed_repeat_diff": second - first,
                          "random": stats(losses), "random_losses": losses})
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
    user = {k: v for k, v in spec.overrides.items()}
    if spec.preset == "paper-10m":
        return resolve("nanogpt-10m", user), Variant(config, {"residual": config})
    if spec.preset == "nanogpt-10m":
        return resolve("paper-10m", user), Variant(config, {"residual": config})
    return spec, Variant(f"{config} nanogpt", {"residual": config, **nanogpt_overrides(spec)})


def _f(x: float | None, fmt: str = ".4f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def snapshot_table(run: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["step", "fixed", "fixed twice: diff", "random mean", "random std", "random range", "fixed - random mean"]
    rows = [[str(s["step"]), _f(s["fixed"]), f"{s['fixed_repeat_diff']:.1e}", _f(s["random"]["mean"]),
             _f(s["random"]["std"]), f"[{_f(s['random']['min'])}, {_f(s['random']['max'])}]",
             _f(s["fixed"] - s["random"]["mean"], "+.4f")] for s in run["snapshots"]]
    return headers, rows


def best_table(runs: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    headers = ["setting", "preset", "seed", "trained with", "training best (step)", "fixed best (step)",
               "random best: mean +/- std [range]", "random argmin != fixed"]
    with_paper = any(r["preset"] in PAPER for r in runs)
    if with_paper:
        headers.append("paper")
    rows = []
    for r in runs:
        b = r["best"]
        rl = b["random_loss"]
        rows.append([r["setting"], r["preset"], str(r["seed"]),
                     f"{r['val_mode']} val, {r['lr_schedule']} lr, {'tied' if r['tie_embeddings'] else 'untied'}",
                     f"{_f(r['best_val_loss'])} ({r['best_step']})", f"{_f(b['fixed_loss'])} ({b['fixed_step']})",
                     f"{_f(rl['mean'])} +/- {_f(rl['std'])} [{_f(rl['min'])}, {_f(rl['max'])}]",
                     f"{b['fraction_different']:.0%}"])
        if with_paper:
            rows[-1].append(PAPER.get(r["preset"], {}).get(r["config"], "-"))
    return headers, rows


def write_report(path: Path, results: dict[str, Any]) -> Path:
    import plotly.graph_objects as go

    from interp.plots import PALETTE, loss_curves, save_html

    levels = results["reference_levels"]
    refs = reference_lines(levels)
    levels_text = levels_line(levels).capitalize()
    runs = results["runs"]
    intro = (f"Preset {results['preset']}, config {results['residual_config']}, seeds {results['seeds']}; "
             f"{results['repeats']} random-batch evaluations per snapshot (fresh batches each time, as nanoGPT "
             f"evaluates), against the fixed validation batches (seed 99991). {levels_text}. The fixed-batch "
             f"loss evaluated twice differs by at most {max(r['best']['max_fixed_repeat_diff'] for r in runs):.1e}.")
    headers, rows = best_table(runs)
    sections: list = [intro, ("Best validation loss: fixed vs random batches", table_figure(headers, rows))]
    for r in runs:
        fig = go.Figure()
        for i, s in enumerate(r["snapshots"]):
            fig.add_trace(go.Box(x=[f"step {s['step']}"] * len(s["random_losses"]), y=s["random_losses"],
                                 name=f"random batches ({results['repeats']} draws)", boxpoints="all", jitter=0.4,
                                 marker=dict(color=PALETTE[0], size=4), line=dict(color=PALETTE[0]),
                                 showlegend=i == 0, legendgroup="random", offsetgroup="random"))
        fig.add_trace(go.Scatter(x=[f"step {s['step']}" for s in r["snapshots"]],
                                 y=[s["fixed"] for s in r["snapshots"]], mode="markers+lines", name="fixed batches",
                                 marker=dict(color=PALETTE[1], size=10, symbol="diamond")))
        fig.update_layout(title=f"{r['setting']} run ({r['preset']}, {r['variant']}, seed {r['seed']}): "
                                f"random-batch val loss per snapshot vs fixed", yaxis_title="val loss (nats)",
                          showlegend=True)
        headers, rows = snapshot_table(r)
        b = r["best"]
        text = (f"Fixed batches pick step {b['fixed_step']} as best; the random-batch argmin differs in "
                f"{b['fraction_different']:.0%} of {results['repeats']} repeats (steps picked: {b['random_steps']}).")
        sections += [(f"Snapshots, {r['setting']} run, seed {r['seed']}", text, fig), table_figure(headers, rows)]
    curves = {f"{r['setting']}/seed{r['seed']}": (r["val_curve"]["steps"], r["val_curve"]["loss"]) for r in runs}
    sections.append(("Validation loss during training (each run's own val_mode)",
                     loss_curves(curves, refs, title="Validation loss as recorded in training")))
    return save_html(sections, path, title=f"Evaluation noise - {results['preset']}")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser("python -m experiments.eval_noise", __doc__.split("results.json schema")[0],
                         default_out="runs/eval_noise")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"residual config (default {DEFAULT_CONFIG})")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help=f"random-batch evaluations per snapshot (default {DEFAULT_REPEATS})")
    parser.add_argument("--snapshots", type=int, default=DEFAULT_SNAPSHOTS,
                        help=f"evaluation steps at which weights are kept (default {DEFAULT_SNAPSHOTS})")
    parser.add_argument("--no-comparison", action="store_true", help="skip the nanoGPT-setting run")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.config not in RESIDUALS:
        raise ToolkitError(f"--config must be one of {', '.join(RESIDUALS)}, got {args.config!r}")
    if args.repeats < 2:
        raise ToolkitError(f"--repeats must be at least 2, got {args.repeats}")
    if args.snapshots < 2:
        raise ToolkitError(f"--snapshots must be at least 2, got {args.snapshots}")
    spec = spec_from_args(args)
    refuse_overrides(spec, {"residual": "--config"})
    seeds = parse_seeds(args.seeds, [spec.train.seed])
    settings = [("preset", spec, Variant(args.config, {"residual": args.config}))]
    if not args.no_comparison:
        settings.append(("nanogpt", *comparison(spec, args.config)))
    from training.data import load_corpus

    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    levels = reference_levels(spec, corpus)
    out = Path(args.out)
    result_dir = out / spec.preset
    print(f"eval noise: preset {spec.preset}, config {args.config}, seeds {seeds}, {len(settings) * len(seeds)} runs, "
          f"{args.repeats} random evaluations x {args.snapshots} snapshots each -> {result_dir}")
    plan = {}  # (preset, variant name) -> (setting, spec, variant, resolved, snapshot steps)
    groups: dict[str, tuple[RunSpec, list[Variant]]] = {}  # one run_grid (one progress bar) per preset
    for setting, s, variant in settings:
        resolved = resolve(s.preset, {**s.overrides, **variant.overrides})
        steps = snapshot_steps(resolved.train.max_steps, resolved.train.eval_interval, args.snapshots)
        plan[(s.preset, variant.name)] = (setting, s, variant, resolved, steps)
        groups.setdefault(s.preset, (s, []))[1].append(variant)
    records = []
    for preset, (s, variants) in groups.items():
        records += [(preset, r) for r in run_grid(
            s, variants, seeds, out, progress=not args.no_progress, corpus=corpus,
            callbacks=lambda v, seed, preset=preset: [SnapshotCallback(plan[(preset, v.name)][4])])]
    runs = []
    train_time = 0.0
    eval_start = time.perf_counter()
    for preset, record in records:
        setting, s, variant, resolved, steps = plan[(preset, record["variant"])]
        base = run_summary(record)
        train_time += base["wall_time_s"]
        directory = run_dir(out, s.preset, variant, record["seed"])
        analysis = analyse_run(directory, resolved, corpus, steps, args.repeats, not args.no_progress)
        last = analysis["snapshots"][-1]
        matches = (abs(last["fixed"] - base["final_val_loss"])
                   if resolved.train.val_mode == "fixed" and last["step"] == base["steps"] else None)
        runs.append({"setting": setting, "preset": s.preset, "config": args.config, **base,
                     "val_mode": resolved.train.val_mode, "lr_schedule": resolved.train.lr_schedule,
                     "tie_embeddings": resolved.model.tie_embeddings, **analysis, "fixed_matches_training": matches})
    eval_time = time.perf_counter() - eval_start
    summary = {}
    for setting, *_ in settings:
        rs = [r for r in runs if r["setting"] == setting]
        summary[setting] = {
            "best_fixed": stats([r["best"]["fixed_loss"] for r in rs]),
            "best_random_mean": stats([r["best"]["random_loss"]["mean"] for r in rs])["mean"],
            "fraction_different": stats([r["best"]["fraction_different"] for r in rs])["mean"],
            "random_std_mean": stats([s["random"]["std"] for r in rs for s in r["snapshots"]])["mean"],
        }
    comp = settings[1] if len(settings) > 1 else None
    results = {
        "schema": SCHEMA,
        "experiment": "eval_noise",
        "preset": spec.preset,
        "seeds": seeds,
        "residual_config": args.config,
        "repeats": args.repeats,
        "snapshot_count": args.snapshots,
        "random_seed_base": RANDOM_SEED_BASE,
        "config": {"model": spec.model.to_dict(), "train": spec.train.to_dict(), "overrides": spec.overrides,
                   "comparison": {"preset": comp[1].preset, "variant": comp[2].name,
                                  "overrides": {**comp[1].overrides, **comp[2].overrides}} if comp else None},
        "reference_levels": levels,
        "runs": runs,
        "summary": summary,
        "software": software_versions(),
        "train_wall_time_s": train_time,
        "eval_wall_time_s": eval_time,
    }
    results["wall_time_s"] = time.perf_counter() - start
    write_results(result_dir / "results.json", results)
    print()
    print(levels_line(levels))
    for r in runs:
        print(f"\n{r['setting']} run: {r['preset']} / {r['variant']} / seed {r['seed']} "
              f"({r['val_mode']} val in training, {r['lr_schedule']} lr)")
        headers, rows = snapshot_table(r)
        print(format_table(headers, rows))
        if r["fixed_matches_training"] is not None:
            print(f"fixed-batch loss at step {r['snapshots'][-1]['step']} vs the training evaluation: "
                  f"|diff| = {r['fixed_matches_training']:.1e}")
    print()
    headers, rows = best_table(runs)
    print(format_table(headers, rows))
    print(f"fixed batches evaluated twice: max |diff| = {max(r['best']['max_fixed_repeat_diff'] for r in runs):.1e} "
          f"(identical batches, deterministic evaluation); random: {args.repeats} draws of "
          f"{spec.train.eval_batches} batches per snapshot")
    if not args.no_report:
        write_report(result_dir / "report.html", results)
        print(f"report: {result_dir / 'report.html'}")
    print(f"results: {result_dir / 'results.json'}  (wall time {time.perf_counter() - start:.0f}s)")
    return 0


run = cli(main)

if __name__ == "__main__":
    raise SystemExit(run())
