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
    schedule     attn_only at depth 6 with a constant lr against the preset's warm-up + cosine (8 seeds each), and
                 ffn_only depth 3 with warm-up: escape times and plateau as above
    attn         (--parts ...,attn) attn_only at depths 4 and 8, constant lr

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
                predictions-floor.json (written before the arm trained); written_before_training
    knob        per knob arm: prediction, observed {n, median, floor_at_last}, held {median, floor, held},
                control (the arm it is compared with), logrank_p (scipy.stats.logrank against it), u_match
    transfer    per non-control constant-lr arm: what the controls' relation predicts and whether it held
    factor      the controls' median escape ratio per layer (deeper / shallower)
    alignment   mechanism.aligned over every escaped ffn_only constant-lr run, order
    early       feature -> escape_predictor.evaluate_by_seed over the deepest control depth
    init        signal_table(...): seeds, depths, widths, n_ctxs, cells, rates
    software, train_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from experiments.escape_time.escape_predictor import evaluate_by_seed
from experiments.escape_time.mechanism import MEASURES as ESCAPE_MEASURES
from experiments.escape_time.mechanism import aligned, order
from experiments.escape_time.mechanism import series as escape_series
from experiments.escape_time.survival import escape_step, kaplan_meier, median_escape, survival_at
from experiments.floor.arms import Arm, Arms, add_arguments, check
from experiments.floor.plateau import cell_plateau, plateau
from experiments.floor.relation import fit_relation, held, observe, predict
from experiments.shared.frame import Context, Experiment, Group, Job, run_summary
from interp.errors import ToolkitError
from probes.uniformity import UniformityProbe

SCHEMA = "floor/1"
PREDICTIONS = "predictions-floor.json"
PRESET_SEEDS = {"smoke": 4}
DEFAULT_SEEDS = 16
PRESET_INIT_SEEDS = {"smoke": 2}
DEFAULT_INIT_SEEDS = 8
MEASURES = {
    "residual_last": "residual, last resid_post",
    "residual_block0": "residual, block 0 resid_post",
    "cosine_last": "mean cosine between positions, last resid_post",
    "erank_last": "effective rank, last resid_post",
    "qk_grad": "query/key gradient norm (all layers)",
    "vo_grad": "value/output gradient norm (all layers)",
    **{k: ESCAPE_MEASURES[k] for k in ("alpha_tt_layer0", "grad_block0", "growth")},
}
EARLY_FEATURES = ("u", "residual_last", "qk_grad", "val_loss")


def defaults(spec) -> dict[str, Any]:
    return {"lr_schedule": "constant", "eval_from": 0.0, "probe_interval": 2 * spec.train.eval_interval}


def default_seeds(spec) -> list[int]:
    return [spec.train.seed + k for k in range(PRESET_SEEDS.get(spec.preset, DEFAULT_SEEDS))]


def probe_every(ctx: Context) -> int:
    return 2 * ctx.spec.train.eval_interval


def _group(ctx: Context, arms: Arms, chosen: list[Arm]) -> list[Group]:
    every = probe_every(ctx)

    def callbacks(variant, seed):
        return [UniformityProbe(every)]

    groups = []
    for n in sorted({a.seeds for a in chosen}, key=lambda n: -1 if n is None else n):
        variants = [arms.variant(a) for a in chosen if a.seeds == n]
        seeds = None if n is None else sorted(ctx.seeds)[:n]
        groups.append(Group(ctx.spec, variants, callbacks=callbacks, seeds=seeds))
    return groups


def _finished(ctx: Context, groups: list[Group]) -> bool:
    return all(j.run_dir(ctx.out).finished for j in _jobs(groups, ctx))


def plan(ctx: Context) -> list[Group]:
    """Controls first; the knob once they have finished (its prediction is fitted on them); the rest last."""
    if ctx.spec.model.n_ctx < 2:
        raise ToolkitError(f"the floor needs n_ctx >= 2 (positions to collapse), got {ctx.spec.model.n_ctx}")
    arms = Arms(ctx)
    controls = _group(ctx, arms, [a for a in arms.arms if a.part == "control"])
    knob = _group(ctx, arms, [a for a in arms.arms if a.part == "knob"])
    rest = _group(ctx, arms, [a for a in arms.arms if a.part in ("schedule", "attn")])
    groups = list(controls)
    if not _finished(ctx, controls):
        return groups or rest
    groups += knob
    if _finished(ctx, knob):
        groups += rest
    return groups


def _jobs(groups: list[Group], ctx: Context) -> list[Job]:
    return [Job(g, v, s) for g in groups for v in g.variants for s in (g.seeds or ctx.seeds)]


# ----- per run ------------------------------------------------------------------------------------------


def margins(margin: float) -> list[float]:
    return [margin / 2, margin, 2 * margin]


def uniformity_series(probes: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in MEASURES}
    for r in probes.get("uniformity", []):
        s = r["step"]
        out["residual_last"].append((s, r["residual"][-1]))
        out["residual_block0"].append((s, r["residual"][2]))  # sites: resid_pre 0, resid_mid 0, resid_post 0
        out["cosine_last"].append((s, r["cosine"][-1]))
        out["erank_last"].append((s, r["erank"][-1]))
        g = r.get("grads", {})
        if "q" in g:
            out["qk_grad"].append((s, math.sqrt(sum(x * x for x in g["q"] + g["k"]))))
            out["vo_grad"].append((s, math.sqrt(sum(x * x for x in g["v"] + g["o"]))))
    for k, v in escape_series(probes).items():
        if k in out:
            out[k] = v
    return {k: sorted(v) for k, v in out.items() if v and all(math.isfinite(x) for _, x in v)}


def step0_u(record: dict[str, Any]) -> float:
    first = [r for r in record.get("probes", {}).get("uniformity", []) if r["step"] == 0]
    if not first:
        raise ToolkitError(
            f"{record['run_dir']}/probes.jsonl has no step-0 uniformity record (a run trained without "
            "probes.uniformity.UniformityProbe, or its probes.jsonl was cut): move that run aside and run again"
        )
    return -math.log(max(first[0]["residual"][-1], 1e-300))


def summarise_run(record: dict[str, Any], ctx: Context, arms: dict[str, Arm]) -> dict[str, Any]:
    curve = record["val_curve"]
    if not curve["steps"]:
        raise ToolkitError(f"{record['run_dir']}/metrics.jsonl holds no validation evaluation; move that run aside")
    arm = arms[record["variant"]]
    unigram, every = ctx.levels["unigram"], ctx.spec.train.eval_interval
    summary = run_summary(record)
    return {
        "variant": record["variant"],
        "seed": record["seed"],
        "part": arm.part,
        "residual": arm.residual,
        "n_layers": arm.depth,
        "scale": arm.scale,
        "schedule": arm.schedule,
        "run_dir": summary["run_dir"],
        "steps": summary["steps"],
        "last_step": curve["steps"][-1],
        "final_val_loss": summary["final_val_loss"],
        "u": step0_u(record),
        "escape": {f"{m:g}": escape_step(curve["steps"], curve["loss"], unigram - m) for m in margins(ctx.args.margin)},
        "plateau": {f"{m:g}": plateau(curve["loss"], unigram, m, every) for m in margins(ctx.args.margin)},
        "series": uniformity_series(record.get("probes", {})),
        "val_curve": list(zip(curve["steps"], curve["loss"], strict=True)),
    }


def cell(runs: list[dict[str, Any]], key: str, keys: list[str]) -> dict[str, Any]:
    first = runs[0]
    times = [r["escape"][key] if r["escape"][key] is not None else r["last_step"] for r in runs]
    escaped = [r["escape"][key] is not None for r in runs]
    km = kaplan_meier(times, escaped)
    last = max(r["last_step"] for r in runs)
    return {
        "name": first["variant"],
        **{k: first[k] for k in ("part", "residual", "n_layers", "scale", "schedule")},
        "n": len(runs),
        "n_escaped": sum(escaped),
        "seeds": [r["seed"] for r in runs],
        "last_step": last,
        "u_mean": float(np.mean([r["u"] for r in runs])),
        "median": median_escape(km),
        "survival_at_last": list(survival_at(km, last)),
        "plateau": {k: cell_plateau(runs, k) for k in keys},
    }


# ----- predictions, written before the knob trains -------------------------------------------------------


def _relation_runs(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [
        {"u": r["u"], "escape": r["escape"][key], "last_step": r["last_step"]} for r in runs if r["part"] == "control"
    ]


def _control_runs(ctx: Context, arms: Arms) -> list[dict[str, Any]]:
    """The finished control runs, each checked as a reused run is before anything of it is read."""
    from experiments.shared.launch import run_config

    names = arms.by_name()
    out = []
    for job in _jobs(_group(ctx, arms, [a for a in arms.arms if a.part == "control"]), ctx):
        run, asked = job.run_dir(ctx.out), run_config(job, ctx.corpus)
        run.check(asked)
        run.verify_finished(asked)
        record = run.load()
        record.update(variant=job.variant.name, seed=job.seed)
        out.append(summarise_run(record, ctx, names))
    return out


def _public(relation: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in relation.items() if k != "draws"}


def write_predictions(ctx: Context, jobs: list[Job]) -> list[str]:
    """Before the knob arms in `jobs` train: their predictions into predictions-floor.json (an arm already
    there keeps its first prediction), and the lines that print them."""
    from experiments.floor.init_measure import init_uniformity, probe_batches
    from interp.io import atomic_write

    arms = Arms(ctx)
    by_name = arms.by_name()
    knob = [j for j in jobs if j.variant.name in by_name and by_name[j.variant.name].part == "knob"]
    if not knob:
        return []
    path = ctx.result_dir / PREDICTIONS
    stored = json.loads(path.read_text()) if path.exists() else {"arms": {}}
    key = f"{ctx.args.margin:g}"
    relation = None
    batches = probe_batches(ctx.corpus.val, ctx.spec.model.n_ctx, ctx.spec.train.batch_size)
    lines = []
    for name in dict.fromkeys(j.variant.name for j in knob):
        members = [j for j in knob if j.variant.name == name]
        seeds = [j.seed for j in members]
        entry = stored["arms"].get(name)
        if entry is None or entry.get("seeds") != seeds or entry.get("margin") != key:
            if relation is None:
                relation = fit_relation(_relation_runs(_control_runs(ctx, arms), key))
            us = [init_uniformity(j.spec.model, j.seed, batches, j.variant.model_init)["u"] for j in members]
            steps = members[0].spec.train.max_steps
            entry = {
                "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "margin": key,
                "seeds": seeds,
                "us": us,
                "last_step": steps,
                "relation": _public(relation),
                "prediction": predict(relation, us, steps, ctx.spec.train.eval_interval),
                "trained_after": [not j.run_dir(ctx.out).path.exists() for j in members],
            }
            stored["arms"][name] = entry
        lines.append(prediction_text(name, entry))
    ctx.result_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(stored, indent=1)))
    lines.append(f"predictions written to {path} before these arms train")
    return lines


def prediction_text(name: str, entry: dict[str, Any]) -> str:
    p = entry["prediction"]
    if not p.get("predicted"):
        return f"{name}: no prediction ({p.get('why')})"
    lo, hi = p["median"]["lower"], p["median"]["upper"]
    m = f"[{_step(lo)}, {_step(hi)}]"
    f_lo, f_hi = p["floor_interval"]
    return (
        f"{name}: predicted ({entry['created']}) from u = {np.mean(entry['us']):.3f}: median escape {m}, "
        f"on the floor at step {entry['last_step']} {p['floor_at_last']:.2f} [{f_lo:.2f}, {f_hi:.2f}]"
        + (" (uninformative: its interval spans the whole run)" if p["uninformative"] else "")
    )


def _step(v: float | None) -> str:
    return "past the last step" if v is None else f"{v:.0f}"


# ----- analysis -----------------------------------------------------------------------------------------


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    from experiments.floor.init_measure import init_uniformity, probe_batches
    from experiments.floor.signal_table import signal_table

    arms = Arms(ctx)
    names = arms.by_name()
    runs = [summarise_run(r, ctx, names) for r in records]
    keys = [f"{m:g}" for m in margins(ctx.args.margin)]
    key = f"{ctx.args.margin:g}"
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_arm.setdefault(r["variant"], []).append(r)
    cells = [cell(rs, key, keys) for rs in by_arm.values()]
    relation = fit_relation(_relation_runs(runs, key))

    path = ctx.result_dir / PREDICTIONS
    stored = json.loads(path.read_text())["arms"] if path.exists() else {}
    batches = probe_batches(ctx.corpus.val, ctx.spec.model.n_ctx, ctx.spec.train.batch_size)
    knob, predictions = {}, {}
    for name, rs in by_arm.items():
        arm = names[name]
        if arm.part != "knob":
            continue
        entry = stored.get(name)
        seeds = [r["seed"] for r in rs]
        if entry is None or entry["seeds"] != seeds or entry.get("margin") != key:  # predicted now: said so
            entry = {"created": None, "seeds": seeds, "us": [r["u"] for r in rs], "last_step": rs[0]["last_step"]}
            entry["prediction"] = predict(relation, entry["us"], entry["last_step"], ctx.spec.train.eval_interval)
            entry["trained_after"] = [False] * len(rs)
        predictions[name] = entry
        observed = observe([{"escape": r["escape"][key]} for r in rs], rs[0]["last_step"])
        control = arms.name(arms.control_for(arm))
        knob[name] = {
            "prediction": entry["prediction"],
            "written_before_training": entry["created"] is not None and all(entry["trained_after"]),
            "observed": observed,
            "held": held(entry["prediction"], observed),
            "u_match": max(abs(a - r["u"]) for a, r in zip(entry["us"], rs, strict=True)),
            "control": control,
            "logrank_p": _logrank(rs, by_arm.get(control, []), key),
        }
    transfer = {}
    for name, rs in by_arm.items():
        arm = names[name]
        if arm.part in ("control", "knob") or arm.schedule != "constant":
            continue
        p = predict(relation, [r["u"] for r in rs], rs[0]["last_step"], ctx.spec.train.eval_interval)
        o = observe([{"escape": r["escape"][key]} for r in rs], rs[0]["last_step"])
        transfer[name] = {"prediction": p, "observed": o, "held": held(p, o)}
    ffn = [r for r in runs if r["residual"] == "ffn_only" and r["schedule"] == "constant"]
    alignment = aligned(
        [{"escape": r["escape"][key], "series": r["series"]} for r in ffn], 0, probe_every(ctx), MEASURES
    )
    alignment["order"] = order(alignment)
    early = _early(ctx, runs, arms, key)
    factor = _factor(cells, arms)
    # Init measures of the runs recomputed from their configs: the logged step-0 u is what the model starts at
    init_diffs = [
        abs(
            init_uniformity(_model_cfg(ctx, r), r["seed"], batches, arms.variant(names[r["variant"]]).model_init)["u"]
            - r["u"]
        )
        for r in runs[:4]
    ]
    for r in runs:
        r.pop("series")
        r.pop("val_curve")
    init_seeds = ctx.args.init_seeds or PRESET_INIT_SEEDS.get(ctx.spec.preset, DEFAULT_INIT_SEEDS)
    table = signal_table(
        ctx.spec, ctx.corpus.val, [ctx.spec.train.seed + k for k in range(init_seeds)], ctx.spec.preset, ctx.progress
    )
    return {
        "margin": ctx.args.margin,
        "margins": margins(ctx.args.margin),
        "margins_text": keys,
        "parts": list(arms.parts),
        "lr": arms.lr,
        "probe_every": probe_every(ctx),
        "early_step": early["step"],
        "runs": runs,
        "cells": cells,
        "relation": _public(relation),
        "predictions": predictions,
        "knob": knob,
        "transfer": transfer,
        "factor": factor,
        "alignment": alignment,
        "early": early["features"],
        "init_check_max_diff": max(init_diffs) if init_diffs else None,
        "init": table,
    }


def _model_cfg(ctx: Context, run: dict[str, Any]):
    return ctx.spec.model.replace(residual=run["residual"], n_layers=run["n_layers"])


def _logrank(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float | None:
    from scipy import stats

    if not a or not b:
        return None

    def data(rs):
        done = [r["escape"][key] for r in rs if r["escape"][key] is not None]
        cens = [r["last_step"] for r in rs if r["escape"][key] is None]
        return stats.CensoredData(uncensored=done, right=cens)

    if not any(r["escape"][key] is not None for r in a + b):
        return None
    return float(stats.logrank(data(a), data(b)).pvalue)


def _early(ctx: Context, runs: list[dict[str, Any]], arms: Arms, key: str) -> dict[str, Any]:
    train = ctx.spec.train
    steps = [k for k in range(1, train.max_steps) if train.is_eval_step(k) and k % probe_every(ctx) == 0]
    step = max((k for k in steps if k <= 100), default=steps[0] if steps else 0)
    deepest = max(d for d, _ in arms.controls)
    pool = [r for r in runs if r["part"] == "control" and r["n_layers"] == deepest]

    def at(points, s):
        before = [x for t, x in points if t <= s]
        return before[-1] if before else None

    samples = [
        {
            "seed": r["seed"],
            "features": {
                "u": r["u"],
                "residual_last": at(r["series"].get("residual_last", []), step),
                "qk_grad": at(r["series"].get("qk_grad", []), step),
                "val_loss": at(r["val_curve"], step),
            },
            "escaped": r["escape"][key] is not None,
        }
        for r in pool
    ]
    return {"step": step, "features": evaluate_by_seed(samples, EARLY_FEATURES)}


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


# ----- console and report -------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    key = f"{results['margin']:g}"
    headers = ["arm", "runs", "escaped", "median escape [95%]", "on floor at end", "plateau", "u at init"]
    rows = []
    for c in results["cells"]:
        m = c["median"]
        med = "past end" if m["median"] is None else f"{m['median']:.0f} [{_step(m['lower'])}, {_step(m['upper'])}]"
        s = c["survival_at_last"]
        p = c["plateau"][key]
        rows.append(
            [
                c["name"],
                str(c["n"]),
                str(c["n_escaped"]),
                med,
                f"{s[0]:.2f} [{s[1]:.2f}, {s[2]:.2f}]",
                f"{p['word']} ({p['n_waits']}/{p['n']}, {p['median_time']:.0f} steps)",
                f"{c['u_mean']:.3f}",
            ]
        )
    return headers, rows


def summary(results: dict[str, Any]) -> str:
    lines = []
    rel = results["relation"]
    if rel.get("fitted"):
        b = rel["b"]
        lines.append(
            f"relation (controls, {rel['n_runs']} runs, {rel['n_escaped']} escaped): log T = "
            f"{rel['a']['value']:.2f} + {b['value']:.2f} [{b['lower']:.2f}, {b['upper']:.2f}] u, sigma "
            f"{rel['sigma']['value']:.2f}"
        )
    else:
        lines.append(f"relation: not fitted ({rel.get('why')})")
    for name, k in results["knob"].items():
        lines.append(knob_line(name, k))
    for name, t in results["transfer"].items():
        lines.append(transfer_line(name, t))
    rates = results["init"]["rates"]
    if rates:
        lines.append(
            "at initialisation, residual per layer: "
            + "; ".join(f"{c} x{r['rate']:.2f} [{r['lower']:.2f}, {r['upper']:.2f}]" for c, r in rates.items())
        )
    f = results.get("factor")
    if f and f.get("factor"):
        lines.append(
            f"controls: the median wait grows x{f['factor']:.1f} a layer (depth {f['depths'][0]} to {f['depths'][1]})"
        )
    al = results["alignment"]
    if al["order"]:
        lines.append(
            f"first to move around the escape ({al['n_escaped']} escapes): "
            + ", ".join(f"{n} {lead:+.0f} ({k} runs)" for n, lead, k in al["order"][:4])
        )
    return "\n".join(lines)


def knob_line(name: str, k: dict[str, Any]) -> str:
    p, o, h = k["prediction"], k["observed"], k["held"]
    if not p.get("predicted"):
        return f"{name}: no prediction ({p.get('why')})"
    when = "written before training" if k["written_before_training"] else "NOT written before training"
    verdict = "held" if h["held"] else "failed"
    obs = f"observed median {_step(o['median'])}, {o['floor_at_last']:.2f} on the floor"
    pm = f"predicted median [{_step(p['median']['lower'])}, {_step(p['median']['upper'])}]"
    pf = f"on the floor [{p['floor_interval'][0]:.2f}, {p['floor_interval'][1]:.2f}]"
    lr = "" if k["logrank_p"] is None else f"; log-rank against {k['control']} p = {k['logrank_p']:.2g}"
    return f"{name}: prediction {verdict} ({when}): {pm}, {pf}; {obs} ({o['n']} runs){lr}"


def transfer_line(name: str, t: dict[str, Any]) -> str:
    p, o, h = t["prediction"], t["observed"], t["held"]
    if not p.get("predicted"):
        return f"{name}: the controls' relation predicts nothing ({p.get('why')})"
    return (
        f"{name}: the ffn_only relation {'holds' if h['held'] else 'fails'}: predicted median "
        f"[{_step(p['median']['lower'])}, {_step(p['median']['upper'])}], observed {_step(o['median'])} "
        f"({o['n']} runs)"
    )


def sections(results: dict[str, Any], ctx: Context) -> list:
    from experiments.floor.report import init_figure, init_rows

    headers, rows = init_rows(results)
    from experiments.shared.text import table_figure

    return [
        ("Summary", summary(results), None),
        (
            "At initialisation",
            "residual at the last resid_post, mean over seeds [95% t interval]",
            init_figure(results),
        ),
        table_figure(headers, rows),
    ]


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
        "lr": "the arms (the preset's lr x 0.5)",
        "min_lr": "the arms",
    },
    defaults=defaults,
    default_preset="phase-cell",
    replan=True,
    preface=lambda ctx, jobs: preface(ctx, jobs),
    default_seeds=default_seeds,
)


def preface(ctx: Context, jobs: list[Job]) -> str:
    from experiments.shared.cost import time_here

    arms = Arms(ctx)
    names = sorted({j.variant.name for j in jobs})
    lines = [f"arms: {', '.join(names)}" if names else "arms: none to train"]
    if ctx.args.launcher == "local" and any(not j.run_dir(ctx.out).finished for j in jobs):
        lines.append(time_here(ctx, jobs))
    lines += write_predictions(ctx, jobs)
    by_name = arms.by_name()
    if "knob" in arms.parts and all(by_name[n].part == "control" for n in names):
        lines.append("the knob arms are planned once the controls have finished (their prediction is fitted on them)")
    return "\n".join(lines)
