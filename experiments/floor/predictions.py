"""The knob's predictions, written to predictions-floor.json before its arms train and never rewritten."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from experiments.floor.arms import Arms, arm_groups
from experiments.floor.per_run import summarise_floor_run
from experiments.floor.relation import fit_relation, predict
from experiments.runner.frame import Context, Job
from experiments.shared.plan import plan_jobs
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
    jobs = plan_jobs(arm_groups(ctx, arms, [a for a in arms.arms if a.part in parts]), ctx.seeds)
    records = finished_records(ctx, jobs, skip_unfinished=skip_unfinished)
    return [summarise_floor_run(record, ctx, names) for _, record in records]


def prediction_slot(name: str, seeds: list[int], margin: str, stored: dict[str, Any]) -> str:
    """Where an arm's prediction is kept: under its name, or beside an earlier one for other seeds or margin."""
    return name if name not in stored else f"{name} [margin {margin}, seeds {','.join(map(str, seeds))}]"


def find_prediction(
    stored: dict[str, Any], name: str, seeds: list[int], margin: str
) -> tuple[str, dict[str, Any] | None]:
    """(slot, the stored prediction for exactly these seeds and margin, or None): never one for other runs."""
    found = [
        (slot, entry)
        for slot, entry in arm_entries(stored, name, margin)
        if sorted(entry.get("seeds") or []) == sorted(seeds)  # --seeds 4,3,2,1 names the runs of 1,2,3,4
    ]
    if len(found) > 1:
        raise ToolkitError(two_entries(name, margin, [slot for slot, _ in found]))
    return found[0] if found else (prediction_slot(name, seeds, margin, stored), None)


def two_entries(name: str, margin: str, slots: list[str]) -> str:
    """The refusal for a file holding two predictions of one arm: the writer never writes a second, so one of
    them was put there by hand, and which one the runs were trained after cannot be told from the file."""
    return (
        f"the prediction file holds {len(slots)} predictions for {name} at margin {margin} ({'; '.join(slots)}): "
        "a prediction is written once and never beside another for the same runs - restore the committed file"
    )


def arm_entries(stored: dict[str, Any], name: str, margin: str) -> list[tuple[str, dict[str, Any]]]:
    """(slot, entry) of every stored prediction for the arm `name` at this margin, in the file's order; an entry
    filed under `name` that describes another arm (its name, its pin, or its depth, width, scale or last step)
    is refused: a renamed entry would otherwise be read as this arm's."""
    found = [
        (slot, entry)
        for slot, entry in stored.items()
        if (slot == name or slot.startswith(f"{name} [")) and entry.get("margin") == margin
    ]
    for slot, entry in found:
        if (other := described_arm(entry, name)) is not None:
            raise ToolkitError(
                f"the prediction file's entry {slot!r} describes another arm ({other}): an entry is never "
                "renamed - restore the committed file"
            )
    return found


# An arm's name as experiments.floor.arms.Arms.name writes it: what it says of depth, width, steps and scale.
NAMED = re.compile(r" L(?P<depth>\d+)(?: d(?P<width>\d+))? (?P<last_step>\d+) steps(?: qk(?P<scale>\S+))?")


def described_arm(entry: dict[str, Any], name: str) -> str | None:
    """What in `entry` names an arm other than `name` (its "arm", the name its pin was committed under, or a
    depth, width, scale or last step its name does not say), or None where nothing does."""
    if "arm" in entry and entry["arm"] != name:
        return f"arm {entry['arm']!r}"
    if "digest" not in entry:
        pinned = UNDIGESTED.get(entry_digest(entry))
        if pinned not in (None, name):
            return f"committed as {pinned!r}"
    m = NAMED.search(name)
    if m is None:
        return None
    said = {k: v for k, v in m.groupdict().items() if v is not None}
    want = {k: (float(v) if k == "scale" else int(v)) for k, v in said.items()} | {"scale": float(said.get("scale", 1))}
    wrong = [f"{k} {entry[k]!r}" for k, v in want.items() if k in entry and entry[k] != v]
    return ", ".join(wrong) or None


class StoredPrediction(BaseModel):
    """What every stored prediction holds (the knob's and the law's add their own fields): one u and one
    trained_after a seed."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    created: str
    margin: str
    seeds: list[int] = Field(min_length=1)
    us: list[float]
    trained_after: list[bool]
    prediction: dict[str, Any]
    digest: str | None = None
    arm: str | None = None  # the arm it was written for (entries from before 2026-12-06 say it by their slot)
    last_step: int | None = None
    relation: dict[str, Any] | None = None  # the knob's
    depth: int | None = None  # the law's, with what follows
    width: int | None = None
    scale: float | None = None
    law: dict[str, Any] | None = None
    fitted_on: dict[str, Any] | None = None
    factor_by_seeds: dict[str, Any] | None = None
    spread_factor_by_seeds: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_a_seed(self) -> StoredPrediction:
        if not len(self.seeds) == len(self.us) == len(self.trained_after):
            raise ValueError("seeds, us and trained_after differ in length")
        return self


def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object_pairs_hook for the prediction files: json would keep a repeated key's last value, so a
    second entry under one name would go unseen."""
    keys = [k for k, _ in pairs]
    if twice := sorted({k for k in keys if keys.count(k) > 1}):
        raise ValueError(f"a key is written twice: an object repeats the key(s) {twice[:3]}")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number a prediction holds")


def _finite(text: str) -> float:
    """json's parse_float: a number past float's range (1e400) is read as inf by json, so refused here."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a float's range: no number a prediction holds")
    return value


def load_predictions(path: Path) -> dict[str, Any]:
    """A prediction file's arms ({} when there is none yet), each entry checked (StoredPrediction); a file that is
    not one, or repeats a key, is refused by name."""
    if not path.exists():
        return {}
    keep = "the predictions are kept, never rewritten; restore it"
    try:
        stored = json.loads(
            path.read_text(), object_pairs_hook=no_repeats, parse_constant=_no_constant, parse_float=_finite
        )
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise ToolkitError(f"{path} is not a prediction file ({e}): {keep}") from None
    if not isinstance(stored, dict) or not isinstance(stored.get("arms"), dict) or set(stored) != {"arms"}:
        raise ToolkitError(f"{path} holds no 'arms' object, or more than it: {keep}")
    for slot, entry in stored["arms"].items():
        try:
            StoredPrediction.model_validate(entry)
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            where = ".".join(map(str, err["loc"])) or "the entry"
            raise ToolkitError(f"{path}: {slot!r}: {where}: {err['msg']}: {keep}") from None
        except (TypeError, OverflowError) as e:  # an int past float's range among its us
            raise ToolkitError(f"{path}: {slot!r}: {e}: {keep}") from None
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


# The knob's three predictions were written (b1bd2f7, 2026-12-04 12:13 UTC) before entries carried a digest: their
# digests as committed, so a hand edit of them is seen as one of a newer entry is.
# Each digest with the arm it was committed under, so an entry moved to another arm's name is seen too.
UNDIGESTED = {
    "898a295906d04c24f66d6d9b96d92a697b8aba30435b37dbdf5d7ae38d140dbc": "ffn_only L2 1200 steps qk8",
    "a2f29180ec4212e24fdec5db314d4c56bd17a1a2e8e15d20cc4f555f92b8f2e4": "ffn_only L2 1200 steps qk12",
    "709f8e1da590d4797b2eec34f70a082a31d5f57d875b3f88c55fd07ed800b912": "ffn_only L3 1200 steps qk12",
}


def edited(entry: dict[str, Any]) -> bool:
    """True when a stored prediction no longer matches its digest; one without a digest must be one of the
    entries written before digests (UNDIGESTED), as committed. The digest is plain sha256: it shows an edit, not
    a forger who computes it again (git, or a shipped folder's MANIFEST, does)."""
    if "digest" not in entry:
        return entry_digest(entry) not in UNDIGESTED
    return entry["digest"] != entry_digest(entry)


def created_at(entry: dict[str, Any]) -> datetime.datetime | None:
    """When the entry says it was written (a timezone-aware time), or None where that is not one."""
    try:
        when = datetime.datetime.fromisoformat(entry["created"])
    except (KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None


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
    """The whole prediction file, atomically, in strict JSON (a non-finite number is refused, never written).
    Called under writing(path): another writer's entries are read before, never lost."""
    from interp.files.io import atomic_write, dumps

    text = dumps({"arms": arms}, path, indent=1)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Held from reading a prediction file to writing it back: two commands on one --out (other margins, other
    seeds) each add their entries to what the other wrote."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(f".{path.name}.lock")):
        yield


# u at init is recomputed from the seed and the arm's config (deterministic); past this, the entry's us are not
# the runs' - a prediction file copied from another --out or another configuration.
U_TOLERANCE = 1e-4


def not_its_runs(verdict: dict[str, Any]) -> str:
    """The console's words where a stored prediction's u at init differ from its runs' ('' where they agree)."""
    u = verdict.get("u_match")
    if u is None or u <= U_TOLERANCE:
        return ""
    return f"; NOT the runs it predicted (their u at init differ from its by up to {u:.3g}: a file from another --out?)"


def written_before_training(entry: dict[str, Any], started: float | None = None) -> bool:
    """Made before any of its runs existed, and not edited since (edited: no longer matches its digest). Its
    time must be a real one, not in the future, and before `started` (the earliest of its runs' config.json
    times, where the runs trained in this --out: a copy's times say nothing)."""
    when = created_at(entry)
    now = datetime.datetime.now(datetime.UTC)
    if when is None or when > now or (started is not None and when.timestamp() > started):
        return False
    after = entry.get("trained_after")  # one True a seed: none of its runs existed when it was written
    whole = isinstance(after, list) and len(after) == len(entry.get("seeds") or []) > 0
    return whole and all(x is True for x in after) and not edited(entry)


def first_started(ctx: Context, runs: list[dict[str, Any]]) -> float | None:
    """The earliest config.json time (written when a run starts) of `runs` where they trained: in --out, or
    under --analyse-only in the analysed --out (its copies here are written after the runs); None for a shipped
    folder, whose archive keeps no times."""
    from experiments.shipping.ship import is_shipped

    source = getattr(ctx.args, "analyse_only", None)
    if source is not None and is_shipped(Path(source)):
        return None
    base = ctx.result_dir if source is None else Path(source) / ctx.spec.preset
    times = []
    for r in runs:
        run = Path(r["run_dir"])  # under --out's result folder, or already relative to it
        config = base / (run.relative_to(ctx.result_dir) if run.is_relative_to(ctx.result_dir) else run) / "config.json"
        if config.is_file():
            times.append(config.stat().st_mtime)
    return min(times, default=None)


def jobs_started(ctx: Context, jobs: list[Job]) -> float | None:
    """The earliest config.json time of those of `jobs` whose runs exist in --out (before they train: None)."""
    paths = [j.run_dir(ctx.out).path / "config.json" for j in jobs]
    return min((p.stat().st_mtime for p in paths if p.is_file()), default=None)


def write_predictions(ctx: Context, jobs: list[Job]) -> list[str]:
    """Before the knob arms in `jobs` train: their predictions into predictions-floor.json, and the lines that
    print them. A stored prediction is never rewritten: one for the same seeds and margin is kept as it was; one
    for other seeds or another margin stays where it is and the new one goes beside it."""
    arms = Arms(ctx)
    by_name = arms.by_name()
    knob = [j for j in jobs if j.variant.name in by_name and by_name[j.variant.name].part == "knob"]
    if not knob:
        return []
    path = ctx.result_dir / PREDICTIONS
    with writing(path):
        return knob_predictions(ctx, arms, knob, path)


def knob_predictions(ctx: Context, arms: Arms, knob: list[Job], path: Path) -> list[str]:
    """write_predictions' work, under the file's lock."""
    from experiments.floor.init_measure import init_uniformity, probe_batches

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
                arm=name,
                seeds=seeds,
                us=us,
                last_step=steps,
                relation=without_draws(relation),
                prediction=predict(relation, us, steps, ctx.spec.train.eval_interval),
                trained_after=[not j.run_dir(ctx.out).path.exists() for j in members],
            )
            stored[slot] = entry
            new = True
        late = late or not written_before_training(entry, jobs_started(ctx, members))  # edited, or too late
        lines.append(knob_prediction_text(name, entry))
    if new:
        save_predictions(ctx, path, stored)
    # a prediction made when an arm's runs already existed (file deleted, new margin) is not one made before them
    when = "some not written before their arms' runs (not a test)" if late else "all made before their arms trained"
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
