"""python -m experiments.floor: what the ffn_only floor is - token uniformity, from initialisation to escape.

The candidate: with no skip around attention, each layer mixes the positions of a sequence, so the stream
drifts towards one vector for every position (rank collapse) and the loss waits at the unigram level until
training undoes it. It predicts (1) at initialisation ffn_only and none lose token diversity layer by layer,
attn_only more slowly, full not; (2) one relation between that loss and the wait serves every depth; (3) the
measures recover around the escape; (4) a knob that slows collapse at initialisation shortens the wait by an
amount predicted before training. Each may fail; the command says which held.

    init table   no training: residual, cosine and effective rank of the last resid_post at initialisation for
                 full, attn_only, ffn_only, none and ffn_only + self_bias 4 over depths, widths and context
                 lengths, 95% intervals over --init-seeds seeds, the rate per layer (experiments.floor.signal_table)
    controls     ffn_only at depths 2 (1200 steps) and 3 (3600 steps), constant lr 1e-3 from step 0, 16 seeds;
                 probes.uniformity logged every 2 evaluations (UniformityProbe) beside the default probes
    relation     log(escape step) against each run's own collapse at step 0, u = -log(residual), censored
                 log-normal (experiments.floor.relation)
    knob         the query/key initial scale (experiments.floor.knob: sharper attention at random, no
                 preference for the current token) at --qk-scales; before a knob arm trains, its predicted
                 median escape and fraction on the floor at the last step are written to
                 predictions-floor.json with the time (never overwritten), then compared: held or not
    plateau      steps within the band unigram +/- margin, and whether a run waits or descends through
                 (experiments.floor.plateau), at the margins m/2, m, 2m
    alignment    the uniformity measures, the query/key and value/output gradients and the escape-time
                 probes' measures aligned on each escape (experiments.escape_time.mechanism): which moves first
    early        within the deepest control depth: the step-0 collapse, the residual and the query/key gradient
                 at the early step (the last evaluation <= 100) as held-out one-feature predictors of escape
                 by the end of the run, and of escape by the shallowest control's length (1200 steps)
    schedule     attn_only at depth 6 with a constant lr against the preset's warm-up + cosine (8 seeds each), and
                 ffn_only depth 3 with warm-up: escape times and plateau as above
    attn         (--parts ...,attn) attn_only at depths 4 and 8, constant lr; depth 6's constant arm then takes
                 every seed
    law          (--parts ...,law,heldout) the wait as a law in collapse and depth, log T = a + b u + c L with a
                 spread growing with depth (experiments.floor.law), fitted on the shipped floor runs (--law-from)
                 and new ffn_only runs at depth 1 (scales 1 and 16) and depth 3 (scale 16); held-out arms (depth 4
                 at scale 16, depth 2 at width 128) predicted before they train into predictions-law.json (never
                 rewritten; --predict-only writes it and trains none of them), then judged: held = the
                 Kaplan-Meier median inside the predicted interval and within x1.5 of the predicted median
    confirm      the knob arms at 3x their length, 3 seeds; with schedule, attn_only's constant-lr depth 6 (and,
                 with attn, 8) at 3x the schedule arms' length, 3 seeds: does the escape, or the floor, last?
    deep         (--parts deep) the paper-124m depth in miniature: 12 layers at phase-cell width (d_model 64,
                 4 heads, n_ctx 64), every seed, 600 steps (the preset's own length), lr 1e-3: attn_only with
                 paper-124m's warm-up fraction (0.1 of the arm: 60 steps) and cosine decay to lr/10, attn_only
                 with a constant lr from step 0, full and ffn_only constant as anchors; each attn_only arm again
                 at 3x (1800 steps, warm-up 180) with 3 seeds. The gradient probe logs every step to step 50,
                 then every log_interval (10); the console prints the fraction on the floor at the end, the
                 log-rank between the two schedules and per layer the MLP and attention gradient norms at steps
                 0, 1, 2, 5, 10, 25, 50 (experiments.floor.deep). Cut to fit 2 cores, by a depth-12 step timed
                 first: the length (600 steps, where the floor's other attn_only arms ran 1200 and 3600), not
                 the seeds, the width or the depth; 64 runs + 6 at 3x, about 2.5 h of 2 cores to themselves

Escape: the first evaluation from which the validation loss stays below unigram - margin (the rule of
experiments.escape_time.survival). Default: preset phase-cell, 16 seeds (1337-1352); --preset smoke runs a
small version of every part in about a minute. The cost is printed before any work.

results.json schema ("floor/1"):
    schema, experiment, preset, seeds, config, reference_levels, margin, margins, margins_text, parts, lr,
    probe_every, early_step
    runs        one per run: variant, seed, part, residual, n_layers, scale, schedule, run_dir, steps,
                last_step, final_val_loss, u (step-0 collapse, from the run's own probe), escape {margin ->
                step or null}, plateau {margin -> {time, longest, waits}}
    cells       per arm: name, part, residual, n_layers, scale, schedule, n, n_escaped, last_step, u_mean,
                median {median, lower, upper}, survival_at_last [value, lower, upper], plateau {margin ->
                cell_plateau}
    relation    fit_relation(controls): fitted, a, b, sigma {value, lower, upper}, n_runs, n_escaped, params
    predictions {arm -> {created, seeds, us, prediction (relation.predict), trained_after}} from
                predictions-floor.json (written before the arm trained, with a sha256 digest); written_before_training
                (False for one edited since: its digest no longer matches), edited
    knob        per knob arm: prediction, observed {n, median, floor_at_last}, held {median, floor, held},
                control (the arm it is compared with), logrank_p (scipy.stats.logrank against it), u_match
    transfer    per non-control constant-lr arm: what the controls' relation predicts and whether it held
    factor      the controls' median escape ratio per layer (deeper / shallower)
    alignment   mechanism.aligned over every escaped ffn_only constant-lr run, order
    early       feature -> escape_predictor.evaluate_by_seed over the deepest control depth (escaped by the end)
    early_horizon, early_by_horizon   the same with "escaped by step early_horizon" (the shallowest control's
                length) as the outcome
    init        signal_table(...): seeds, depths, widths, n_ctxs, cells, rates
    law, heldout   with the law part only (experiments.floor.law_part): the fit with its intervals and where its
                runs came from; per held-out arm its stored prediction, the observation and the verdict; each
                run then also has d_model and eval_every
    deep        only with the deep part: depth, warmup_fraction, warmup_steps, steps, warmup_arm,
                constant_arm, confirm_arms, logrank_p (warm-up against constant), step0_gap (the largest step-0
                gradient difference between the two schedules' runs of one seed), grad_table [{arm, step, lr,
                n, attn, mlp, resid (per layer, median over runs), total}]; each deep run has grads {step ->
                {attn, mlp, resid, total}} (probes.GradientProbe, before clipping)
    software, train_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

from typing import Any

from experiments.escape_time.escape_predictor import evaluate_by_seed
from experiments.escape_time.mechanism import aligned, order
from experiments.escape_time.survival import logrank_p, margins
from experiments.floor.arms import (
    Arms,
    add_arguments,
    arm_groups,
    check,
    deep_warmup_fraction,
    uniformity_interval,
)
from experiments.floor.deep import early_grads, grad_steps, grad_table, step0_gap
from experiments.floor.law_part import law_results, preface_lines
from experiments.floor.law_predictions import law_plan
from experiments.floor.per_run import MEASURES, arm_cell, summarise_floor_run
from experiments.floor.predictions import (
    edited,
    find_prediction,
    first_started,
    relation_runs,
    stored_predictions,
    without_draws,
    write_predictions,
    written_before_training,
)
from experiments.floor.relation import fit_relation, held, observe, predict
from experiments.floor.report import sections, summary, table
from experiments.runner.frame import Context, Experiment, Group, Job
from experiments.shared.plan import all_finished, by_variant
from experiments.statistics.held_out import value_at
from interp.errors import ToolkitError

SCHEMA = "floor/1"
PRESET_SEEDS = {"smoke": 4}
DEFAULT_SEEDS = 16
PRESET_INIT_SEEDS = {"smoke": 2}
DEFAULT_INIT_SEEDS = 8
EARLY_FEATURES = ("u", "residual_last", "qk_grad", "val_loss")


def defaults(spec) -> dict[str, Any]:
    return {"lr_schedule": "constant", "eval_from": 0.0, "probe_interval": 2 * spec.train.eval_interval}


def default_seeds(spec) -> list[int]:
    return [spec.train.seed + k for k in range(PRESET_SEEDS.get(spec.preset, DEFAULT_SEEDS))]


def plan(ctx: Context) -> list[Group]:
    """Controls first; the knob once they have finished (its prediction is fitted on them); the rest last."""
    if ctx.spec.model.n_ctx < 2:
        raise ToolkitError(f"the floor needs n_ctx >= 2 (positions to collapse), got {ctx.spec.model.n_ctx}")
    arms = Arms(ctx)
    law = law_plan(ctx, arms)  # the law's fit runs, then its held-out arms (experiments.floor.law_predictions)
    controls = arm_groups(ctx, arms, [a for a in arms.arms if a.part == "control"])
    knob = arm_groups(ctx, arms, [a for a in arms.arms if a.part == "knob"])
    rest = arm_groups(ctx, arms, [a for a in arms.arms if a.part in ("confirm", "schedule", "attn", "deep")])
    groups = list(controls)
    if not all_finished(controls, ctx):
        return (groups or rest) + law
    groups += knob
    if all_finished(knob, ctx):
        groups += rest
    return groups + law


# ----- analysis -----------------------------------------------------------------------------------------


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    from experiments.floor.init_measure import init_uniformity, probe_batches
    from experiments.floor.signal_table import signal_table

    arms = Arms(ctx)
    names = arms.by_name()
    runs = [summarise_floor_run(r, ctx, names) for r in records]
    for record, r in zip(records, runs, strict=True):  # the deep part's first steps' gradients, per layer
        if r["part"] == "deep":
            r["grads"] = early_grads(record.get("probes", {}), grad_steps(arms.dense), record["run_dir"])
    keys = [f"{m:g}" for m in margins(ctx.args.margin)]
    key = f"{ctx.args.margin:g}"
    by_arm = by_variant(runs)
    cells = [arm_cell(rs, key, keys) for rs in by_arm.values()]
    relation = fit_relation(relation_runs(runs, key))

    knob, predictions = _knob(ctx, arms, by_arm, relation, key)
    batches = probe_batches(ctx.corpus.val, ctx.spec.model.n_ctx, ctx.spec.train.batch_size)
    transfer = _transfer(ctx, names, by_arm, relation, key)
    ffn = [r for r in runs if r["residual"] == "ffn_only" and r["schedule"] == "constant" and r["part"] != "deep"]
    aligned_runs = [{"escape": r["escape"][key], "series": r["series"]} for r in ffn]
    alignment = aligned(aligned_runs, 0, uniformity_interval(ctx), MEASURES)
    alignment["order"] = order(alignment)
    early = _early(ctx, runs, arms, key)
    factor = _factor(cells, arms)
    # Init measures of the runs recomputed from their configs: the logged step-0 u is what the model starts at
    inits = [(r, arms.variant(names[r["variant"]]).model_init) for r in runs[:4]]
    init_diffs = [abs(init_uniformity(_model_cfg(ctx, r), r["seed"], batches, init)["u"] - r["u"]) for r, init in inits]
    law = law_results(ctx, arms, runs, cells) if "law" in arms.parts else {}
    for r in runs:
        r.pop("series")
        r.pop("val_curve")
        if not law:  # the law's per-run inputs, kept where it read them (the shipped results stay as they were)
            r.pop("d_model")
            r.pop("eval_every")
    n_init = ctx.args.init_seeds or PRESET_INIT_SEEDS.get(ctx.spec.preset, DEFAULT_INIT_SEEDS)
    init_seeds = [ctx.spec.train.seed + k for k in range(n_init)]
    table = signal_table(ctx.spec, ctx.corpus.val, init_seeds, ctx.spec.preset, ctx.progress)
    return {
        "margin": ctx.args.margin,
        "margins": margins(ctx.args.margin),
        "margins_text": keys,
        "parts": list(arms.parts),
        "lr": arms.lr,
        "probe_every": uniformity_interval(ctx),
        "early_step": early["step"],
        "runs": runs,
        "cells": cells,
        "relation": without_draws(relation),
        "predictions": predictions,
        "knob": knob,
        "transfer": transfer,
        "factor": factor,
        "alignment": alignment,
        "early": early["features"],
        "early_horizon": early["horizon"],
        "early_by_horizon": early["by_horizon"],
        "init_check_max_diff": max(init_diffs) if init_diffs else None,
        "init": table,
        **law,
        # only with the deep part: the results of every other command stay as shipped (tests/test_shipped.py)
        **({"deep": deep} if (deep := _deep(ctx, arms, runs, by_arm, key)) else {}),
    }


def _knob(ctx: Context, arms: Arms, by_arm: dict[str, list], relation, key: str) -> tuple[dict, dict]:
    """Per knob arm: its prediction (stored, else made now and said so) against what it did; the predictions."""
    stored, names = stored_predictions(ctx), arms.by_name()
    knob, predictions = {}, {}
    for name, rs in by_arm.items():
        arm = names[name]
        if arm.part != "knob":
            continue
        seeds = [r["seed"] for r in rs]
        entry = find_prediction(stored, name, seeds, key)[1]
        if entry is None:  # no prediction made before these runs trained: one made now, and said so
            entry = {"created": None, "seeds": seeds, "us": [r["u"] for r in rs], "last_step": rs[0]["last_step"]}
            entry["prediction"] = predict(relation, entry["us"], entry["last_step"], ctx.spec.train.eval_interval)
            entry["trained_after"] = [False] * len(rs)
        predictions[name] = entry
        observed = observe([{"escape": r["escape"][key]} for r in rs], rs[0]["last_step"])
        control = arms.name(arms.control_for(arm))
        knob[name] = {
            "prediction": entry["prediction"],
            # a prediction edited after it was written is not the one written before training
            "edited": edited(entry),
            "written_before_training": written_before_training(entry, first_started(ctx, rs)),
            "observed": observed,
            "held": held(entry["prediction"], observed),
            "u_match": max(abs(dict(zip(entry["seeds"], entry["us"], strict=True))[r["seed"]] - r["u"]) for r in rs),
            "control": control,
            "logrank_p": _logrank(rs, by_arm.get(control, []), key),
        }
    return knob, predictions


def _transfer(ctx: Context, names: dict, by_arm: dict[str, list], relation, key: str) -> dict[str, Any]:
    """Per other constant-lr arm (the law's apart): what the controls' relation predicts and whether it held."""
    transfer = {}
    for name, rs in by_arm.items():
        arm = names[name]
        if arm.part in ("control", "knob", "confirm", "deep") or arm.schedule != "constant":
            continue
        if arm.part in ("law", "heldout"):  # the law's runs: read by experiments.floor.law_part
            continue
        p = predict(relation, [r["u"] for r in rs], rs[0]["last_step"], ctx.spec.train.eval_interval)
        o = observe([{"escape": r["escape"][key]} for r in rs], rs[0]["last_step"])
        transfer[name] = {"prediction": p, "observed": o, "held": held(p, o)}
    return transfer


def _deep(ctx: Context, arms: Arms, runs: list, by_arm: dict[str, list], key: str) -> dict[str, Any] | None:
    """The deep part's own reading (experiments.floor.deep); None where it did not run."""
    from training.optimizer import lr_at

    rs = [r for r in runs if r["part"] == "deep"]
    if not rs:
        return None
    chosen = [a for a in arms.arms if a.part == "deep"]
    main = [a for a in chosen if a.length == arms.deep_length and a.residual == "attn_only"]
    warm = arms.name(next(a for a in main if a.schedule == "cosine"))
    constant = arms.name(next(a for a in main if a.schedule == "constant"))
    steps = grad_steps(arms.dense)
    trains = {arms.name(a): ctx.spec.with_overrides(arms.variant(a).overrides).train for a in chosen}
    lrs = {name: {str(s): lr_at(s, train) for s in steps} for name, train in trains.items()}
    return {
        "depth": arms.deep_depth,
        "warmup_fraction": deep_warmup_fraction(),
        "warmup_steps": arms.warmup_steps(next(a for a in main if a.schedule == "cosine")),
        "steps": steps,
        "warmup_arm": warm,
        "constant_arm": constant,
        "confirm_arms": [arms.name(a) for a in chosen if a.length != arms.deep_length],
        "logrank_p": _logrank(by_arm.get(warm, []), by_arm.get(constant, []), key),
        "step0_gap": step0_gap(rs, warm, constant),
        "grad_table": grad_table(rs, lrs, steps),
    }


def _model_cfg(ctx: Context, run: dict[str, Any]):
    width = run.get("d_model", ctx.spec.model.d_model)
    return ctx.spec.model.replace(residual=run["residual"], n_layers=run["n_layers"], d_model=width)


def _logrank(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float | None:
    return logrank_p(*([{"escape": r["escape"][key], "last_step": r["last_step"]} for r in rs] for rs in (a, b)))


def _early(ctx: Context, runs: list[dict[str, Any]], arms: Arms, key: str) -> dict[str, Any]:
    train = ctx.spec.train
    steps = [k for k in range(1, train.max_steps) if train.is_eval_step(k) and k % uniformity_interval(ctx) == 0]
    step = max((k for k in steps if k <= 100), default=steps[0] if steps else 0)
    deepest = max(d for d, _ in arms.controls)
    pool = [r for r in runs if r["part"] == "control" and r["n_layers"] == deepest]

    def features(r):  # EARLY_FEATURES: u, then the last value at or before the early step of each measure
        measures = {**r["series"], "val_loss": r["val_curve"]}
        return {"u": r["u"], **{k: value_at(measures.get(k, []), step) for k in EARLY_FEATURES[1:]}}

    samples = [{"seed": r["seed"], "features": features(r), "escaped": r["escape"][key] is not None} for r in pool]
    # A second outcome where the first has too few non-escapes to test: escaped by the shallowest control's
    # length (the knob arms' length, where depth 3's knob prediction is read)
    horizon = min(n for _, n in arms.controls) * arms.base_steps
    by = [
        {**s, "escaped": r["escape"][key] is not None and r["escape"][key] <= horizon}
        for s, r in zip(samples, pool, strict=True)
    ]
    return {
        "step": step,
        "features": evaluate_by_seed(samples, EARLY_FEATURES),
        "horizon": horizon,
        "by_horizon": evaluate_by_seed(by, EARLY_FEATURES),
    }


def _factor(cells: list[dict[str, Any]], arms: Arms) -> dict[str, Any] | None:
    controls = sorted((c for c in cells if c["part"] == "control"), key=lambda c: c["n_layers"])
    if len(controls) < 2:
        return None
    a, b = controls[0], controls[-1]
    ma, mb = a["median"]["median"], b["median"]["median"]
    gap = b["n_layers"] - a["n_layers"]
    if ma is None or mb is None:
        return {"depths": [a["n_layers"], b["n_layers"]], "factor": None, "why": "a median past its last step"}
    return {"depths": [a["n_layers"], b["n_layers"]], "factor": (mb / ma) ** (1 / gap)}


EXPERIMENT = Experiment(
    name="floor",
    schema=SCHEMA,
    doc=__doc__,
    title="What the floor is",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    owned={
        "residual": "the arms",
        "n_layers": "the arms",
        "lr": "the arms (the preset's lr x 0.5; for smoke x 2)",
        "min_lr": "the arms",
    },
    defaults=defaults,
    default_preset="phase-cell",
    replan=True,
    preface=lambda ctx, jobs: preface(ctx, jobs),
    default_seeds=default_seeds,
)


def preface(ctx: Context, jobs: list[Job]) -> str:
    from experiments.runner.cost import time_here

    arms = Arms(ctx)
    names = sorted({j.variant.name for j in jobs})
    lines = [f"arms: {', '.join(names)}" if names else "arms: none to train"]
    if ctx.args.launcher == "local" and any(not j.run_dir(ctx.out).finished for j in jobs):
        lines.append(time_here(ctx, jobs))
    lines += write_predictions(ctx, jobs)
    lines += preface_lines(ctx, arms, names)  # the law's held-out arms: their stored predictions
    by_name = arms.by_name()
    if "knob" in arms.parts and all(by_name[n].part == "control" for n in names):
        lines.append("the knob arms are planned once the controls have finished (their prediction is fitted on them)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
