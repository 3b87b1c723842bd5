"""The law's held-out predictions, written to predictions-law.json before the held-out arms train, never rewritten.

The law (experiments.floor.law) is fitted on the runs it may see: the shipped floor runs (--law-from, each run's
summary from the shipped results file, its sha256 checked against the folder's MANIFEST.json) and this --out's
finished ffn_only constant-lr runs of the control, knob, confirm and law parts. Once every law-part run has
finished, and before any held-out arm is planned, one entry per held-out arm is written with the time: the
fit and its intervals, the arm's depth, width, query/key scale, step budget and seeds, each seed's u measured
at initialisation, and the prediction (law.predict_arm). The seeds are the lowest n the rule below picks, so
the held-out arms train exactly the seeds their entry names.

seeds       an arm's candidates are SEED_STEPS up to its most (Arm.seeds): the first n whose predicted median
            or spread (law.predict_arm's spread: the arm's own sigma) spans at most law.MAX_FACTOR is taken;
            where none does, the most, and the entry says it is not a prediction (the factor at every
            candidate is kept, so what more seeds would buy is on record).
            Seeds past --seeds continue from its largest (1337..1352, then 1353, ...).
plan        law_plan: the law part's runs; once every run the law is fitted on has finished, the predictions
            are written and then the held-out arms planned. --predict-only writes them and trains no held-out
            arm, so the prediction file can be committed before any of them trains.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from experiments.floor.law import MAX_FACTOR, fit_wait_law, law_runs, predict_arm, tests_something
from experiments.floor.predictions import (
    arm_entries,
    finished_runs,
    load_predictions,
    new_entry,
    predictions_file,
    save_predictions,
    two_entries,
    without_draws,
    writing,
)
from experiments.runner.frame import Context, Group, Job
from experiments.shared.plan import all_finished, extend_seeds
from interp.errors import ToolkitError

LAW_PREDICTIONS = "predictions-law.json"
SEED_STEPS = 16  # candidates 16, 32, 48, ... up to the arm's most (smoke: every 2)
FIT_PARTS = ("control", "knob", "confirm", "law")
SHIPPED_FLOOR = {"phase-cell": "docs/results/data/floor-default"}  # --law-from's default by preset
# The widest predicted interval that is still a prediction (law.MAX_FACTOR, x3); smoke's arms are plumbing only,
# so any interval with its median inside the run counts there.
PRESET_MAX_FACTOR = {"smoke": math.inf}


def law_from(ctx: Context) -> Path | None:
    """--law-from's folder, or the preset's default; None: no shipped runs ('none', or a preset without)."""
    given = getattr(ctx.args, "law_from", None)
    if given is None:
        given = SHIPPED_FLOOR.get(ctx.spec.preset, "none")
    return None if given == "none" else Path(given)


def shipped_summaries(ctx: Context, folder: Path) -> dict[str, Any]:
    """{"runs": the shipped folder's runs the law may be fitted on, each read from its archived logs; "from":
    folder; "sha256": its results file's; "n_shipped": the runs its archive holds}. read_shipped checks every
    file against MANIFEST.json. The runs and their parts come from the archive and this code's own arms, never
    from the results file: an archived run counts where its variant is one of this preset's fit arms (FIT_PARTS:
    never a held-out arm), and only as this command would have trained it (RunDir.load_logs compares its
    config.json with that run's: the same preset, data, lr, batch; the law has no term for them)."""
    import dataclasses
    import tempfile

    from experiments.floor.arms import Arms
    from experiments.shipping.ship import MANIFEST, is_shipped, read_shipped
    from training.run_config import slug

    if not is_shipped(folder):
        raise ToolkitError(f"--law-from {folder}: no {MANIFEST} there; give a shipped floor folder or 'none'")
    shipped = read_shipped(folder)
    runs_in = sorted({name.rsplit("/", 1)[0] for name in shipped.members})  # <preset>/<variant dir>/seed<k>
    presets = {name.split("/", 1)[0] for name in runs_in}
    if presets != {ctx.spec.preset}:
        raise ToolkitError(shipped_preset_refusal(folder, presets, ctx.spec.preset))
    fit_args = {**vars(ctx.args), "parts": ",".join(FIT_PARTS), "qk_scales": None}  # every fit arm, by name
    arms = Arms(dataclasses.replace(ctx, args=argparse.Namespace(**fit_args)))
    by_dir = {slug(arms.name(a)): a for a in arms.arms if a.part in FIT_PARTS}  # as RunDir.of names it
    key, unigram = f"{ctx.args.margin:g}", ctx.reference_levels()["unigram"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            archived_run(ctx, arms, by_dir[rel.split("/")[1]], shipped, Path(tmp), rel, key, unigram)
            for rel in runs_in
            if rel.split("/")[1] in by_dir
        ]
    if not runs:  # recorded as the fit's source, it would name a folder the fit used none of
        raise ToolkitError(
            f"--law-from {folder}: none of its {len(runs_in)} runs is one of this preset's fit arms (the law part's, "
            "the controls', the knob's); give a shipped floor folder that holds them, or 'none'"
        )
    sha = shipped.manifest["files"][shipped.results_path.name]["sha256"]
    return {"runs": runs, "from": str(folder), "sha256": sha, "n_shipped": len(runs_in)}


def shipped_preset_refusal(folder: Path, presets: set[str], preset: str) -> str:
    return (
        f"--law-from {folder}: its runs trained at preset {', '.join(sorted(presets)) or 'none'}, this command "
        f"trains at {preset}; the law has no term for what a preset changes (lr, batch, width, data): give "
        "--law-from none or a floor folder of this preset"
    )


def archived_run(ctx: Context, arms, arm, shipped, tmp: Path, rel: str, key: str, unigram: float) -> dict:
    """One shipped run of the fit arm `arm` as law.law_runs reads it, from its archived files, checked as the run
    this command would train for that arm and seed (config.json, and the logs' wholeness: RunDir.load_logs)."""
    from experiments.cluster.launch import run_config
    from experiments.escape_time.survival import escape_step
    from experiments.floor.per_run import step0_u
    from experiments.shipping.ship import RUN_FILES
    from training.rundir import RunDir

    seed_text = rel.rsplit("/seed", 1)[-1]
    if not seed_text.isdigit():
        raise ToolkitError(f"--law-from {shipped.path}: {rel} is not a run directory <variant>/seed<k>")
    seed, variant = int(seed_text), arms.variant(arm)
    run = RunDir(tmp / rel)
    run.path.mkdir(parents=True)
    for n in RUN_FILES:
        if f"{rel}/{n}" in shipped.members:
            (run.path / n).write_bytes(shipped.members[f"{rel}/{n}"])
    job = Job(Group(ctx.spec, [variant], seeds=[seed]), variant, seed)
    try:
        record = {**run.load_logs(run_config(job, ctx.corpus)), "variant": variant.name, "seed": seed}
        u = step0_u(record)
    except ToolkitError as e:
        raise ToolkitError(
            f"--law-from {shipped.path}: {rel} is not a run this command could fit the law on (it must be the "
            f"run this command trains for {variant.name}, seed {seed}): {e}"
        ) from None
    steps, loss = record["val_curve"]["steps"], record["val_curve"]["loss"]
    spec = job.spec
    return {
        "variant": variant.name,
        "seed": seed,
        "part": arm.part,
        "residual": arm.residual,
        "n_layers": arm.depth,
        "d_model": spec.model.d_model,
        "scale": arm.scale,
        "schedule": arm.schedule,
        "eval_every": steps[1] - steps[0] if len(steps) > 1 else spec.train.eval_interval,
        "last_step": steps[-1],
        "u": u,
        "escape": {key: escape_step(steps, loss, unigram - float(key))},
    }


def fit_on(ctx: Context, here: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the law fitted on the shipped runs and `here`, where its runs came from: the shipped folder, its results
    file's sha256, and the fit's runs in law.law_runs' form)."""
    key = f"{ctx.args.margin:g}"
    folder = law_from(ctx)
    none = {"runs": [], "from": None, "sha256": None, "n_shipped": 0}
    shipped = shipped_summaries(ctx, folder) if folder is not None else none
    runs = law_runs(shipped["runs"] + [r for r in here if r["part"] in FIT_PARTS], key)
    law = fit_wait_law(runs, ctx.spec.train.eval_interval)
    source = {"shipped": shipped["from"], "shipped_sha256": shipped["sha256"], "n_shipped": shipped["n_shipped"]}
    return law, {**source, "runs": runs}


def seed_candidates(most: int, smallest: int) -> list[int]:
    """smallest, smallest + step, ... and `most` itself (step SEED_STEPS, or smallest where that is less)."""
    out = list(range(smallest, most + 1, min(SEED_STEPS, smallest)))
    return out if out and out[-1] == most else [*out, most]


def heldout_group(ctx: Context, arms, arm, seeds: list[int]) -> Group:
    """A held-out arm's runs: exactly the seeds its stored entry names, probed as every floor arm is."""
    from experiments.floor.arms import uniformity_callbacks

    return Group(ctx.spec, [arms.variant(arm)], callbacks=uniformity_callbacks(ctx), seeds=list(seeds))


def heldout_jobs(ctx: Context, arms, arm, seeds: list[int]) -> list[Job]:
    group = heldout_group(ctx, arms, arm, seeds)
    return [Job(group, group.variants[0], s) for s in seeds]


def stored_entry(stored: dict[str, Any], name: str, margin: str) -> dict[str, Any] | None:
    """The held-out arm's entry for this margin (whatever its seeds: the writer chose them), or None; a file
    holding two (the writer writes one) is refused."""
    found = arm_entries(stored, name, margin)
    if len(found) > 1:
        raise ToolkitError(two_entries(name, margin, [slot for slot, _ in found]))
    return found[0][1] if found else None


def read_law_predictions(ctx: Context) -> dict[str, Any]:
    """The entries the held-out arms were (or will be) trained after: --out's file, or under --analyse-only the
    analysed folder's (an --out's <preset>/predictions-law.json, or a shipped folder's copy)."""
    found = predictions_file(ctx, LAW_PREDICTIONS)
    return load_predictions(found) if found is not None else {}


def write_law_predictions(ctx: Context, arms, heldout: list) -> bool:
    """Before any held-out arm is planned: an entry for each of `heldout` (Arm) that has none for this margin.
    True when something was written. A stored entry is never rewritten."""
    path = ctx.result_dir / LAW_PREDICTIONS
    with writing(path):
        return law_predictions(ctx, arms, heldout, path)


def law_predictions(ctx: Context, arms, heldout: list, path: Path) -> bool:
    """write_law_predictions' work, under the file's lock."""
    from experiments.floor.init_measure import init_uniformity, probe_batches

    stored = load_predictions(path)
    key = f"{ctx.args.margin:g}"
    todo = [a for a in heldout if stored_entry(stored, arms.name(a), key) is None]
    if not todo:
        return False
    law, source = fit_on(ctx, finished_runs(ctx, arms, FIT_PARTS, skip_unfinished=True))
    batches = probe_batches(ctx.corpus.val, ctx.spec.model.n_ctx, ctx.spec.train.batch_size)
    for arm in todo:
        name, variant = arms.name(arm), arms.variant(arm)
        spec = ctx.spec.with_overrides(variant.overrides)
        most = arm.seeds or len(ctx.seeds)
        seeds = extend_seeds(ctx.seeds, most)
        us = [init_uniformity(spec.model, s, batches, variant.model_init)["u"] for s in seeds]
        last, every = spec.train.max_steps, spec.train.eval_interval
        candidates = seed_candidates(most, min(SEED_STEPS, most, len(ctx.seeds)))
        widest = PRESET_MAX_FACTOR.get(ctx.spec.preset, MAX_FACTOR)
        by_n = {n: predict_arm(law, us[:n], arm.depth, last, every, widest, spread=True) for n in candidates}
        n = next((k for k, p in by_n.items() if tests_something(p)), most)
        entry = new_entry(
            key,
            arm=name,
            depth=arm.depth,
            width=spec.model.d_model,
            scale=arm.scale,
            last_step=last,
            seeds=seeds[:n],
            us=us[:n],
            law=without_draws(law),
            fitted_on={k: v for k, v in source.items() if k != "runs"},
            prediction=by_n[n],
            factor_by_seeds={str(k): p.get("factor") for k, p in by_n.items()},
            spread_factor_by_seeds={str(k): p["spread"].get("factor") for k, p in by_n.items() if "spread" in p},
            # False for a seed whose run directory existed already: that run is not predicted before training
            trained_after=[not j.run_dir(ctx.out).path.exists() for j in heldout_jobs(ctx, arms, arm, seeds[:n])],
        )
        stored[name if name not in stored else f"{name} [margin {key}]"] = entry
    save_predictions(ctx, path, stored)
    return True


def _never_trained(ctx: Context, arms, arm, seeds: list[int], source: Path) -> bool:
    """No run of the held-out arm in an analysed --out (a shipped folder's archive is checked where it is read)."""
    from experiments.shipping.ship import is_shipped

    if is_shipped(source):
        return False
    return not any(j.run_dir(source).path.exists() for j in heldout_jobs(ctx, arms, arm, seeds))


def law_plan(ctx, arms) -> list:
    """The law part's groups; once they have finished, the held-out arms' (their predictions written first,
    never under --analyse-only or --predict-only's training-free run)."""
    from experiments.floor.arms import arm_groups

    fit = [a for a in arms.arms if a.part == "law"]
    held = [a for a in arms.arms if a.part == "heldout"]
    if fit and law_from(ctx) is not None and getattr(ctx.args, "analyse_only", None) is None:
        shipped_summaries(ctx, law_from(ctx))  # a folder the law cannot use is refused before hours of training
    groups = arm_groups(ctx, arms, fit) if fit else []
    if not held:
        return groups
    if getattr(ctx.args, "analyse_only", None) is None:
        # predicted once every run this command fits the law on has finished (the knob's and confirm's are
        # planned after the controls: until they exist, they are not finished either)
        seen = arm_groups(ctx, arms, [a for a in arms.arms if a.part in FIT_PARTS])
        if not all_finished(seen, ctx):
            return groups
        write_law_predictions(ctx, arms, held)
        if getattr(ctx.args, "predict_only", False):
            return groups
    source = getattr(ctx.args, "analyse_only", None)
    if source is not None and not Path(source).is_dir():  # said as every analysis says it, not as no prediction
        from experiments.runner.analyse_only import Source

        Source.open(source, ctx.out)
    stored = read_law_predictions(ctx)
    key = f"{ctx.args.margin:g}"
    for arm in held:
        entry = stored_entry(stored, arms.name(arm), key)
        if entry is None and source is not None:
            raise ToolkitError(
                f"--analyse-only {ctx.args.analyse_only}: no prediction of {arms.name(arm)} at margin {key} "
                f"({LAW_PREDICTIONS} is missing or lacks it): a held-out arm is judged only against the prediction "
                "written before it trained, never one made now - restore the file, or give --parts without heldout"
            )
        if entry is not None and tests_something(entry["prediction"]):  # a non-prediction tests nothing
            if source is not None and _never_trained(ctx, arms, arm, entry["seeds"], Path(source)):
                raise ToolkitError(
                    f"--analyse-only {source}: {arms.name(arm)} was predicted there and none of its runs trained "
                    "(an --out written by --predict-only): give --parts law to analyse the fit alone, or train "
                    "the held-out arms with the command without --predict-only first"
                )
            groups.append(heldout_group(ctx, arms, arm, entry["seeds"]))
    return groups
