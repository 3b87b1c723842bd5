"""The knob's predictions, written to predictions-floor.json before its arms train and never rewritten."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.floor.arms import Arms, arm_groups, arm_jobs
from experiments.floor.per_run import summarise_floor_run
from experiments.floor.relation import fit_relation, predict
from experiments.runner.frame import Context, Job
from interp.errors import ToolkitError

PREDICTIONS = "predictions-floor.json"


def relation_runs(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [
        {"u": r["u"], "escape": r["escape"][key], "last_step": r["last_step"]} for r in runs if r["part"] == "control"
    ]


def finished_runs(ctx: Context, arms: Arms, parts: tuple[str, ...], skip_unfinished: bool = False) -> list[dict]:
    """The finished runs of `parts` (the relation's controls, the law's fit), each checked as a reused run is
    before anything of it is read; skip_unfinished: leave out those still training instead of refusing."""
    from experiments.cluster.launch import finished_records

    names = arms.by_name()
    jobs = arm_jobs(arm_groups(ctx, arms, [a for a in arms.arms if a.part in parts]), ctx)
    records = finished_records(ctx, jobs, skip_unfinished=skip_unfinished)
    return [summarise_floor_run(record, ctx, names) for _, record in records]


def prediction_slot(name: str, seeds: list[int], margin: str, stored: dict[str, Any]) -> str:
    """Where an arm's prediction is kept: under its name, or beside an earlier one for other seeds or margin."""
    return name if name not in stored else f"{name} [margin {margin}, seeds {','.join(map(str, seeds))}]"


def find_prediction(
    stored: dict[str, Any], name: str, seeds: list[int], margin: str
) -> tuple[str, dict[str, Any] | None]:
    """(slot, the stored prediction for exactly these seeds and margin, or None): never one for other runs."""
    for slot, entry in arm_entries(stored, name, margin):
        if sorted(entry.get("seeds") or []) == sorted(seeds):  # --seeds 4,3,2,1 names the runs of 1,2,3,4
            return slot, entry
    return prediction_slot(name, seeds, margin, stored), None


def arm_entries(stored: dict[str, Any], name: str, margin: str) -> list[tuple[str, dict[str, Any]]]:
    """(slot, entry) of every stored prediction for the arm `name` at this margin, in the file's order."""
    return [
        (slot, entry)
        for slot, entry in stored.items()
        if (slot == name or slot.startswith(f"{name} [")) and entry.get("margin") == margin
    ]


def load_predictions(path: Path) -> dict[str, Any]:
    """predictions-floor.json's arms ({} when there is none yet); a file that is not one is refused by name."""
    if not path.exists():
        return {}
    try:
        stored = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ToolkitError(f"{path} is not JSON ({e}): the predictions are kept, never rewritten; restore it") from e
    if not isinstance(stored, dict) or not isinstance(stored.get("arms"), dict):
        raise ToolkitError(f"{path} holds no 'arms' object: the predictions are kept, never rewritten; restore it")
    return stored["arms"]


def predictions_file(ctx: Context, name: str) -> Path | None:
    """Where the analysed runs' prediction file `name` is: --out's, or under --analyse-only the analysed folder's
    (an --out's <preset>/name, or a shipped folder's copy at its top); None when the folder has none."""
    source = getattr(ctx.args, "analyse_only", None)
    if source is None:
        return ctx.result_dir / name
    return next((p for p in (Path(source) / ctx.spec.preset / name, Path(source) / name) if p.is_file()), None)


def stored_predictions(ctx: Context) -> dict[str, Any]:
    """The predictions the analysed runs were trained after: --out's file, or under --analyse-only the analysed
    folder's (an --out's <preset>/predictions-floor.json, or a shipped results file's copies, sha256-checked)."""
    found = predictions_file(ctx, PREDICTIONS)
    if found is not None:
        return load_predictions(found)
    from experiments.shipping.ship import is_shipped, read_shipped

    source = Path(ctx.args.analyse_only)
    if is_shipped(source):
        shipped = json.loads(read_shipped(source).results_path.read_text()).get("predictions")
        return shipped if isinstance(shipped, dict) else {}
    return {}


def entry_digest(entry: dict[str, Any]) -> str:
    """sha256 of a stored prediction without its digest: an entry edited by hand afterwards no longer matches."""
    import hashlib

    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def edited(entry: dict[str, Any]) -> bool:
    """True when a stored prediction no longer matches its digest (entries written before digests: unchecked)."""
    return "digest" in entry and entry["digest"] != entry_digest(entry)


def without_draws(fit: dict[str, Any]) -> dict[str, Any]:
    """A fit as it is stored and reported: its bootstrap draws left out (the relation's, the law's)."""
    return {k: v for k, v in fit.items() if k != "draws"}


def new_entry(margin: str, **fields: Any) -> dict[str, Any]:
    """A prediction as it is stored: the time it was made, its margin, `fields`, and a digest of them all."""
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    entry = {"created": created, "margin": margin, **fields}
    entry["digest"] = entry_digest(entry)
    return entry


def save_predictions(ctx: Context, path: Path, arms: dict[str, Any]) -> None:
    """The whole prediction file, atomically, in strict JSON (a non-finite number is refused, never written)."""
    from interp.files.io import atomic_write, dumps

    ctx.result_dir.mkdir(parents=True, exist_ok=True)
    text = dumps({"arms": arms}, path, indent=1)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def written_before_training(entry: dict[str, Any]) -> bool:
    """Made before any of its runs existed, and not edited since (edited: no longer matches its digest)."""
    return bool(entry["created"]) and all(entry["trained_after"]) and not edited(entry)


def write_predictions(ctx: Context, jobs: list[Job]) -> list[str]:
    """Before the knob arms in `jobs` train: their predictions into predictions-floor.json, and the lines that
    print them. A stored prediction is never rewritten: one for the same seeds and margin is kept as it was; one
    for other seeds or another margin stays where it is and the new one goes beside it."""
    from experiments.floor.init_measure import init_uniformity, probe_batches

    arms = Arms(ctx)
    by_name = arms.by_name()
    knob = [j for j in jobs if j.variant.name in by_name and by_name[j.variant.name].part == "knob"]
    if not knob:
        return []
    path = ctx.result_dir / PREDICTIONS
    stored = load_predictions(path)
    key = f"{ctx.args.margin:g}"
    relation = None
    batches = probe_batches(ctx.corpus.val, ctx.spec.model.n_ctx, ctx.spec.train.batch_size)
    lines, late, new = [], False, False
    for name in dict.fromkeys(j.variant.name for j in knob):
        members = [j for j in knob if j.variant.name == name]
        seeds = [j.seed for j in members]
        slot, entry = find_prediction(stored, name, seeds, key)
        if entry is None:  # a prediction for other seeds or another margin stays; this one goes beside it
            if relation is None:
                relation = fit_relation(relation_runs(finished_runs(ctx, arms, ("control",)), key))
            us = [init_uniformity(j.spec.model, j.seed, batches, j.variant.model_init)["u"] for j in members]
            steps = members[0].spec.train.max_steps
            entry = new_entry(
                key,
                seeds=seeds,
                us=us,
                last_step=steps,
                relation=without_draws(relation),
                prediction=predict(relation, us, steps, ctx.spec.train.eval_interval),
                trained_after=[not j.run_dir(ctx.out).path.exists() for j in members],
            )
            stored[slot] = entry
            new = True
        late = late or not all(entry["trained_after"])
        lines.append(knob_prediction_text(name, entry))
    if new:
        save_predictions(ctx, path, stored)
    # a prediction made when an arm's runs already existed (file deleted, new margin) is not one made before them
    when = "some made after their arms' runs existed (not a test)" if late else "all made before their arms trained"
    lines.append(f"predictions {'written to' if new else 'read from'} {path}, {when}")
    return lines


def knob_prediction_text(name: str, entry: dict[str, Any]) -> str:
    p = entry["prediction"]
    if not p.get("predicted"):
        return f"{name}: no prediction ({p.get('why')})"
    lo, hi = p["median"]["lower"], p["median"]["upper"]
    m = f"[{step_text(lo)}, {step_text(hi)}]"
    f_lo, f_hi = p["floor_interval"]
    return (
        f"{name}: predicted ({entry['created']}) from u = {np.mean(entry['us']):.3f}: median escape {m}, "
        f"on the floor at step {entry['last_step']} {p['floor_at_last']:.2f} [{f_lo:.2f}, {f_hi:.2f}]"
        + (" (uninformative: its interval spans the whole run)" if p["uninformative"] else "")
    )


def step_text(v: float | None) -> str:
    return "past the last step" if v is None else f"{v:.0f}"
