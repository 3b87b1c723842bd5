"""python -m experiments.escape_time: how long ffn_only waits on the floor, and what changes when it leaves.

The phase diagram found the ffn_only floor to be a plateau that erodes with training length: a boundary "at 1800 steps"
is a snapshot of a waiting-time distribution. This measures the distribution: ffn_only over depth x lr with many seeds a
cell, trained with a constant lr from the first step (lr_schedule=constant has no warm-up), so a run's first N steps do
not depend on how long it is trained: the escape time is the cell's, not the schedule's), each run evaluated and probed
along the way.

    escape         the first evaluation step from which the validation loss stays below the floor
                   (unigram - margin) to the run's end; one-evaluation spikes above it inside a stretch
                   below are ignored, re-crossings are not (experiments.escape_time.survival); runs that
                   never escape are censored at their last step. Reported at the margin, half and twice it
    survival       per cell the Kaplan-Meier fraction still on the floor against step, with a 95% band
                   (scipy's Greenwood log-log; the exact binomial interval where no run was censored earlier),
                   the median escape step with its interval, the fraction escaped
    law            log(escape step) = a + b * depth + c * log2(lr) + sigma * noise (log-normal, censored
                   runs by their survival), bootstrap intervals over runs within cells: exp(b) is the
                   factor each layer multiplies the wait by
    held-out depth --holdout-depth (default 5) is left out of the fit; its predicted median and survival
                   at the last step are printed, then it is trained (planned only once the grid has
                   finished) and the observed values are printed beside the prediction
    mechanism      for runs that escape, aligned on their escape step: alpha_tt by layer, block-0 gradient
                   norm, current-token decodability, norm growth, the loss cost of three routing
                   interventions, and token uniformity: the residual at the last resid_post and the
                   query/key gradient norm over all layers (probes.uniformity.UniformityProbe, on the
                   activation probes' steps) (experiments.escape_time.mechanism: which moves first, by how
                   many steps, on how many runs), and whether attention builds a self path as the loss
                   leaves the floor; a run trained before the uniformity probe was added has neither series
    early          which measurement at the early step (--early-step, default the last evaluation <= 100;
                   block-0 gradient norm at the preset's warmup_steps where that is earlier, a reference step)
                   predicts escape by the last step: a one-feature threshold, held out by seed (fitted on
                   the other seeds' runs), accuracy with an exact interval against always guessing the
                   more common outcome, AUC with a bootstrap interval; depth alone is a baseline
    references     full and attn_only at every depth at the first lr (--references, --reference-seeds)

Default (preset phase-cell): ffn_only at depth 2, 3, 4, 6 x lr 1e-3, 2e-3, 16 seeds a cell, 2x the
preset's steps (1200), evaluated every 25 steps and probed every 50 (the escape probe every 100), held-out
depth 5 at both lrs, full and attn_only references with 4 seeds: 192 runs, about 2.5 h on 2 CPU cores (the
first 160 printed 119 min; docs/results/escape_time.md). The cost is printed before any work (each shape's
step timed now, in ensembles). `--set max_steps=6000` trains 10x the preset's steps;
`--preset smoke` runs a small grid (depths 1 and 2, held-out 3, 4 seeds, 6x its preset's steps at twice its lr,
so that depth 2 escapes and the law is fitted) through every section.

Verdicts follow the project's rules: a cell's median is printed as measured only where the curve reaches
0.5 within the runs' length, the law only where at least two depths have escapes, every interval is
computed, and a statement says how many runs it rests on.

results.json schema ("escape-time/1"):
    schema, experiment, preset, seeds, config, reference_levels, margin, margins [m/2, m, 2m], margins_text
    (the margins as text: the keys below), threshold, early_step, gradient_step (where grad_block0 is read),
    depths, lrs, holdout_depth, probe_every, min_runs
    runs       one per run: variant, seed, residual, n_layers, lr, role ("grid" | "holdout" | "reference"),
               run_dir (relative to the file's folder), final_val_loss, steps, last_step, escape {margin (as
               text) -> step or null}, features {val_loss, alpha_tt_layer0, grad_block0, growth, identity (null
               where not recorded)}
    cells      per (role, residual, n_layers, lr): name, role, residual, n_layers, lr, n, n_escaped, seeds,
               last_step, km {steps, survival, lower, upper, at_risk, times}, median {median, lower, upper}
               (null: past the last step), survival_at_last [value, lower, upper], medians_by_margin
               {margin -> median}
    law        {margin -> fit_law(...)}: n_runs, n_escaped, with_lr, lr_left_out (null or why the lr term is
               left out), depths, lrs, fitted; where fitted: names [intercept, per_layer, (per_lr_doubling,)
               log_sigma], params (their maximum-likelihood values, in that order), covariance (their variance
               matrix, or null where singular), n_bootstrap, n_bootstrap_unfittable, coef {intercept, per_layer,
               per_lr_doubling (with_lr only), sigma -> {value, lower, upper, se}}; where not: reason
               (bootstrap refits omitted from the file; survival.predict_escape reads a cell off params and
               covariance)
    holdout    per held-out cell: depth, lr, n, last_step, predicted {predicted, median, median_interval,
               survival_at_last, survival_interval, step, interval ("bootstrap" | "covariance")} or
               {predicted: false, reason}, observed {median, survival_at_last, n_escaped}
    mechanism  aligned(...): n_escaped, offsets, measures {name -> label, n_runs, mean_curve, lead
               {n, median, interval}, change {n, mean, interval}} for the names alpha_tt_layer0,
               alpha_tt_mean, grad_block0, growth, identity, knock_out_self, self_only, uniform_pattern,
               residual_last, qk_grad (n_runs 0 and no lead where no escaped run logged the measure); order
               [name, median lead, n] earliest first; answer
    predictor  feature (the five above and depth) -> {n, n_escaped, n_seeds, accuracy, interval,
               majority_accuracy, auc, auc_interval, predicts} or {n, n_escaped, n_seeds, untestable}
    command, software, train_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

from typing import Any

from experiments.escape_time.escape_grid import (
    DEFAULT_GRID,
    DEFAULT_LENGTH,
    PRESET_GRID,
    PRESET_LENGTH,
    EscapeGrid,
    add_arguments,
    check,
)
from experiments.escape_time.escape_predictor import early_features, evaluate_by_seed
from experiments.escape_time.mechanism import EscapeProbe, aligned, order, self_path_answer, series
from experiments.escape_time.report import sections, summary, table
from experiments.escape_time.survival import (
    escape_step,
    fit_law,
    law_prediction,
    margins,
    median_escape,
    runs_survival,
    survival_cell,
)
from experiments.runner.frame import Context, Experiment, Group, Job, run_summary
from experiments.shared.plan import all_finished, by_variant, extend_seeds, plan_jobs
from interp.errors import ToolkitError

SCHEMA = "escape-time/1"
MIN_RUNS = 8  # a statement about escapes rests on at least this many runs


def defaults(spec) -> dict[str, Any]:
    t = spec.train
    length = PRESET_LENGTH.get(spec.preset, DEFAULT_LENGTH) * t.max_steps
    return {"max_steps": length, "lr_schedule": "constant", "probe_interval": 2 * t.eval_interval, "eval_from": 0.0}


def default_seeds(spec) -> list[int]:
    n = PRESET_GRID.get(spec.preset, DEFAULT_GRID)[3]
    return [spec.train.seed + k for k in range(n)]


def probe_every(ctx: Context) -> int:
    evals = PRESET_GRID.get(ctx.spec.preset, DEFAULT_GRID)[6]
    every = ctx.args.probe_every or evals * ctx.spec.train.eval_interval
    if every % ctx.spec.train.eval_interval:
        raise ToolkitError(f"--probe-every {every} must be a multiple of eval_interval {ctx.spec.train.eval_interval}")
    return every


def activation_every(ctx: Context) -> int:
    """The step interval of the default activation probes (alpha_tt, norms), which UniformityProbe shares."""
    from probes import ActivationProbe, default_callbacks

    return next(cb.interval for cb in default_callbacks(ctx.spec.train) if isinstance(cb, ActivationProbe))


def early_step(ctx: Context) -> int:
    train = ctx.spec.train
    limit = min(train.max_steps, 10 * train.eval_interval + 101)  # early: at most 10 evaluations past step 100
    steps = [k for k in range(1, limit) if train.is_eval_step(k)]
    if ctx.args.early_step is not None:
        if ctx.args.early_step not in steps:
            raise ToolkitError(
                f"--early-step {ctx.args.early_step} must be an evaluation step (every {train.eval_interval}) "
                f"below {limit} (before max_steps {train.max_steps}, and at most 10 evaluations past step 100: "
                "an early predictor reads an early step)"
            )
        return ctx.args.early_step
    if not steps:
        raise ToolkitError("no evaluation step before max_steps to read early features at; lower eval_interval")
    return max((k for k in steps if k <= 100), default=steps[0])


def plan(ctx: Context) -> list[Group]:
    if ctx.spec.model.n_ctx < 2:
        raise ToolkitError(f"escape times need n_ctx >= 2 (context to route), got {ctx.spec.model.n_ctx}")
    grid = EscapeGrid(ctx)
    every = probe_every(ctx)
    early_step(ctx)

    uniform_every = activation_every(ctx)

    def callbacks(variant, seed):
        from probes.uniformity import UniformityProbe  # probes load the model and TransformerLens: not for --help

        # uniformity on the activation probes' steps (2 evaluations by default): aligned on escape beside alpha_tt
        return [EscapeProbe(every), UniformityProbe(uniform_every)]

    groups = [Group(ctx.spec, grid.grid(), callbacks=callbacks)]
    if grid.references:
        groups.append(Group(ctx.spec, grid.reference(), callbacks=callbacks, seeds=reference_seeds(ctx, grid)))
    if grid.holdout and all_finished(groups[:1], ctx):
        groups.append(Group(ctx.spec, grid.held_out(), callbacks=callbacks))
    return groups


def reference_seeds(ctx: Context, grid: EscapeGrid) -> list[int]:
    """The lowest --reference-seeds of --seeds (counted on past the highest where there are fewer): the same
    seeds in another order reuse the same reference runs."""
    return extend_seeds(ctx.seeds, grid.ref_seeds)


# ----- analysis -----------------------------------------------------------------------------------------


def summarise_escape_run(record: dict[str, Any], ctx: Context, roles: dict[str, str], early: int) -> dict[str, Any]:
    levels = ctx.levels
    curve = record["val_curve"]
    if not curve["steps"]:  # a finished run whose metrics.jsonl is gone or holds no evaluation
        raise ToolkitError(
            f"{record['run_dir']}/metrics.jsonl holds no validation evaluation (missing or emptied after the run "
            "finished); move that run directory aside and run again"
        )
    summary = run_summary(record)
    role, cell = roles[record["variant"]]
    return {
        "variant": record["variant"],
        "seed": record["seed"],
        **{k: cell[k] for k in ("residual", "n_layers", "lr")},
        "role": role,
        **{k: summary[k] for k in ("run_dir", "final_val_loss", "steps")},
        "last_step": curve["steps"][-1],
        "escape": {
            f"{m:g}": escape_step(curve["steps"], curve["loss"], levels["unigram"] - m)
            for m in margins(ctx.args.margin)
        },
        "features": early_features(record, early, ctx.spec.train.warmup_steps),
        "series": series(record.get("probes", {})),
    }


def cell_summary(runs: list[dict[str, Any]], key: str, all_margins: list[str]) -> dict[str, Any]:
    first = runs[0]
    return {
        "name": first["variant"],
        **{k: first[k] for k in ("role", "residual", "n_layers", "lr")},
        **survival_cell(runs, key),
        "medians_by_margin": {m: median_escape(runs_survival(runs, m))["median"] for m in all_margins},
    }


def _law_runs(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [
        {"n_layers": r["n_layers"], "lr": r["lr"], "escape": r["escape"][key], "last_step": r["last_step"]}
        for r in runs
    ]


def _holdout(cell: dict[str, Any], law: dict[str, Any]) -> dict[str, Any]:
    """A held-out cell: the law's prediction for it beside what its runs did."""
    predicted = law_prediction(law, cell["n_layers"], cell["lr"], cell["last_step"])
    observed = {k: cell[k] for k in ("median", "survival_at_last", "n_escaped")}
    depth, lr, n, last = cell["n_layers"], cell["lr"], cell["n"], cell["last_step"]
    return {"depth": depth, "lr": lr, "n": n, "last_step": last, "predicted": predicted, "observed": observed}


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    grid = EscapeGrid(ctx)
    roles = grid.roles()
    early = early_step(ctx)
    runs = [summarise_escape_run(r, ctx, roles, early) for r in records]
    keys = [f"{m:g}" for m in margins(ctx.args.margin)]
    key = f"{ctx.args.margin:g}"
    by_cell = by_variant(runs)
    cells = [cell_summary(rs, key, keys) for rs in by_cell.values()]
    grid_runs = [r for r in runs if r["role"] == "grid"]
    laws = {k: fit_law(_law_runs(grid_runs, k), "escape") for k in keys}
    holdout = [_holdout(c, laws[key]) for c in cells if c["role"] == "holdout"]
    ffn = [r for r in runs if r["residual"] == "ffn_only"]
    mech_runs = [{"escape": r["escape"][key], "series": r["series"]} for r in ffn]
    mechanism = aligned(mech_runs, ctx.spec.train.warmup_steps, probe_every(ctx))
    mechanism["order"] = order(mechanism)
    mechanism["answer"] = self_path_answer(mechanism, MIN_RUNS)
    samples = [
        {
            "seed": r["seed"],
            "features": {**r["features"], "depth": float(r["n_layers"])},
            "escaped": r["escape"][key] is not None,
        }
        for r in ffn
    ]
    for r in runs:
        r.pop("series")
    for law in laws.values():
        law.pop("bootstrap", None)
    return {
        "margin": ctx.args.margin,
        "margins": margins(ctx.args.margin),
        "margins_text": keys,
        "threshold": ctx.levels["unigram"] - ctx.args.margin,
        "early_step": early,
        "gradient_step": min(early, ctx.spec.train.warmup_steps),  # where grad_block0 is read (escape_predictor)
        "depths": list(grid.depths),
        "lrs": list(grid.lrs),
        "holdout_depth": grid.holdout,
        "probe_every": probe_every(ctx),
        "min_runs": MIN_RUNS,
        "runs": runs,
        "cells": cells,
        "law": laws,
        "holdout": holdout,
        "mechanism": mechanism,
        "predictor": evaluate_by_seed(samples),
    }


def preface(ctx: Context, jobs: list[Job]) -> str:
    from experiments.runner.cost import cost_line

    unigram, bigram, margin = ctx.levels["unigram"], ctx.levels["bigram"], ctx.args.margin
    if margin >= unigram - bigram:  # before any run trains: no loss on the floor's side could get under it
        raise ToolkitError(
            f"--margin {margin:g}: the floor threshold unigram - margin ({unigram - margin:.3f}) would be at or "
            f"below the bigram level ({bigram:.3f}); give a margin below {unigram - bigram:.3f}"
        )
    cost, _ = cost_line(ctx, jobs, timed=True)
    lines = [
        f"escape is the first evaluation step from which validation loss stays below {unigram - margin:.3f} "
        f"(unigram {unigram:.3f} - margin {margin:g}); runs that never get there are censored at their last step",
        cost,
    ]
    grid = EscapeGrid(ctx)
    held = {v.name for v in grid.held_out()}
    if held & {j.variant.name for j in jobs}:
        lines += prediction_lines(ctx, grid)
    elif grid.holdout:
        lines.append(
            f"depth {grid.holdout} is held out: its prediction is printed, then it trains, once the grid has finished"
        )
    return "\n".join(lines)


def prediction_lines(ctx: Context, grid: EscapeGrid) -> list[str]:
    """The law fitted on the finished grid, and what it predicts for the held-out depth (before it trains)."""
    from experiments.cluster.launch import finished_records
    from experiments.escape_time.report import prediction_text

    key = f"{ctx.args.margin:g}"
    early = early_step(ctx)
    names = grid.roles()
    jobs = plan_jobs([Group(ctx.spec, grid.grid())], ctx.seeds)
    runs = [summarise_escape_run(record, ctx, names, early) for _, record in finished_records(ctx, jobs)]
    law = fit_law(_law_runs(runs, key), "escape")
    steps = ctx.spec.train.max_steps
    return [prediction_text(grid.holdout, lr, law_prediction(law, grid.holdout, lr, steps)) for lr in grid.lrs]


EXPERIMENT = Experiment(
    name="escape_time",
    schema=SCHEMA,
    doc=__doc__,
    title="Escape times",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    owned={
        "residual": "--references",
        "n_layers": "--depths",
        "lr": "--lrs",
        "min_lr": "--lrs (min_lr keeps the preset's ratio to lr)",
    },
    defaults=defaults,
    default_preset="phase-cell",
    replan=True,
    preface=preface,
    default_seeds=default_seeds,
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
