"""--analyse-only: an experiment's analysis on logged runs, without their checkpoints and without training.

    python -m experiments.<name> --analyse-only SOURCE --out OUT [options that differ from the recorded ones]

The options are the ones recorded with SOURCE's runs (with_recorded_options: a shipped folder's MANIFEST.json
command, or the command an --out's results-<name>.json records), less those that say where runs lie and how
they launch; an option given on the command line wins over the recorded one, and where its value differs
the console says so, one line each.

SOURCE is a shipped folder (experiments.shipping.ship: its files checked against MANIFEST.json) or an experiment's
--out whose runs are there with or without ckpt.pt. Every run the command plans is looked up in
SOURCE; one that is not there is refused by name (nothing trains). Each run's logged files (config.json,
metrics.jsonl, probes.jsonl, final.json) are copied into OUT's run directory, checked there as RunDir.load_logs
checks them (config.json is the run the command asks for: the same configuration and data sha256, as a
reused run is checked; final.json whole; the logs whole and ending with its evaluation), and the experiment's
analysis runs on them. OUT then holds the runs' logs and the results beside them, never a checkpoint, and
SOURCE is never written.

What the analysis reads from the weights is not recomputed: an experiment declares it (Experiment.
without_weights: the part is left out and named under "not_recomputed" in the results, or the whole command
is refused), and a checkpoint read that nothing declared is refused, never filled in.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.shared.plan import Context, Job, select_variants
from experiments.shipping.ship import RUN_FILES, Shipped, is_shipped, missing_files, read_shipped
from interp.errors import CheckpointError, ToolkitError, one_line

NOT_RECOMPUTABLE = "not recomputable without checkpoints"


@dataclass(frozen=True)
class Source:
    """Where --analyse-only reads runs: a shipped folder, or an experiment's --out."""

    path: Path
    shipped: Shipped | None

    @classmethod
    def open(cls, text: str, out: Path) -> Source:
        path = Path(text)
        if not path.is_dir():
            raise ToolkitError(f"--analyse-only {text}: no such folder (a shipped folder or an experiment's --out)")
        here, there = path.resolve(), out.resolve()
        if there == here or here in there.parents:
            raise ToolkitError(
                f"--out {out} is inside --analyse-only {text}: the analysis writes its copy of the logs and its "
                "results elsewhere, never into the folder it reads; give another --out"
            )
        return cls(path, read_shipped(path) if is_shipped(path) else None)

    def files(self, rel: str) -> dict[str, bytes]:
        """The logged files of run <preset>/<variant>/seed<k> (rel) that SOURCE holds."""
        if self.shipped is not None:
            return {n: self.shipped.members[f"{rel}/{n}"] for n in RUN_FILES if f"{rel}/{n}" in self.shipped.members}
        return {n: (self.path / rel / n).read_bytes() for n in RUN_FILES if (self.path / rel / n).is_file()}


def copy_records(source: Source, ctx: Context, experiment: str) -> None:
    """The experiment's record files (ship.RECORD_FILES) from SOURCE into its results folder under --out; one
    there already that differs is refused, as a run's files are."""
    from experiments.shipping.ship import RECORD_FILES

    for name in RECORD_FILES.get(experiment, ()):
        found = [p for p in (source.path / name, source.path / ctx.spec.preset / name) if p.is_file()]
        if not found:
            continue
        data, target = found[0].read_bytes(), ctx.result_dir / name
        if target.exists() and target.read_bytes() != data:
            raise ToolkitError(
                f"{target} is there and is not the copy from {source.path}; --analyse-only never overwrites it - "
                "give another --out"
            )
        ctx.result_dir.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.write_bytes(data)


def rel_dir(job: Job) -> str:
    """A job's run directory relative to --out, as a shipped archive names it."""
    return job.run_dir(Path("")).path.as_posix()


def copy_runs(source: Source, ctx: Context, jobs: list[Job]) -> None:
    """Every job's logged files from SOURCE into its run directory under --out; a run SOURCE lacks (or holds
    unfinished) is refused by name, and so is a run directory under --out that holds other files or a checkpoint."""
    found = {rel_dir(j): source.files(rel_dir(j)) for j in jobs}
    missing = [j for j in jobs if missing_files(found[rel_dir(j)])]  # probes.jsonl too, where it was probed
    if missing:
        names = "; ".join(f"{j.variant.name} seed {j.seed} ({rel_dir(j)})" for j in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        trained = f"`{source.shipped.manifest.get('command')}`" if source.shipped else "the command that trained them"
        raise ToolkitError(
            f"{len(missing)} of the {len(jobs)} runs this command plans are not whole finished runs in {source.path} "
            f"(config.json, metrics.jsonl, final.json, probes.jsonl where probed): {names}{more}; --analyse-only "
            f"trains nothing - give the options of {trained}, or train the runs with the command without --analyse-only"
        )
    for job in jobs:
        run = job.run_dir(ctx.out)
        if run.ckpt.exists():
            raise ToolkitError(
                f"{run.path} holds a trained run (ckpt.pt): --analyse-only writes a folder of logs only; "
                "give another --out"
            )
        files = found[rel_dir(job)]
        for name in RUN_FILES:
            target = run.path / name
            if target.exists() and target.read_bytes() != files.get(name):
                raise ToolkitError(
                    f"{target} is there and is not the copy from {source.path}; --analyse-only never overwrites "
                    "a run's files - give another --out"
                )
        run.path.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            if not (run.path / name).exists():
                (run.path / name).write_bytes(data)


def load_logged(job: Job, ctx: Context) -> dict[str, Any]:
    """A run from its logged files (RunDir.load_logs), labelled as frame.load_record labels a run."""
    from experiments.cluster.launch import run_config
    from training.run_config import differing_fields

    run, asked = job.run_dir(ctx.out), run_config(job, ctx.corpus)
    logged = run.read_config()
    fields = differing_fields(logged, asked) if logged is not None else []
    if fields:  # RunDir's own message blames --out, which copy_runs just filled from SOURCE: another --out fails alike
        raise ToolkitError(
            f"the logged run {rel_dir(job)} was trained with other options than this command asks for "
            f"({'; '.join(fields)[:300]}); --analyse-only trains nothing - give the options of the command that "
            "trained it (a shipped folder's MANIFEST.json records it)"
        )
    record = run.load_logs(labels_as_logged(logged, asked))
    record.update(preset=job.group.spec.preset, variant=job.variant.name, seed=job.seed)
    return record


def labels_as_logged(logged: dict[str, Any] | None, asked: dict[str, Any]) -> dict[str, Any]:
    """The asked record, with the logged run's meta labels where `python -m training` wrote them: {preset,
    variant}, without the seed an experiment's runs add (the trainer CLI's run directories name it, and
    train.seed, compared with the rest of the config, records it). Reuse reads such a run as the experiment's
    (`--collect` collected the H200 runs so); --analyse-only does too. Any other difference is refused."""
    meta, want = (logged or {}).get("meta"), asked.get("meta") or {}
    seed = ((logged or {}).get("train") or {}).get("seed")
    if isinstance(meta, dict) and "seed" not in meta and "seed" in want and seed == want["seed"]:
        if meta == {k: v for k, v in want.items() if k != "seed"}:
            return {**asked, "meta": meta}
    return asked


@contextlib.contextmanager
def weights_refused(name: str):
    """A checkpoint read inside the analysis that the experiment did not declare (Experiment.without_weights) is
    refused, never filled in."""
    try:
        yield
    except CheckpointError as e:
        raise ToolkitError(
            f"{name}'s analysis reads the weights ({one_line(e)}): {NOT_RECOMPUTABLE}; --analyse-only reads the "
            "logged runs only"
        ) from None


def check_results_file(path: Path) -> None:
    """A results file at the analysis's own place that a training command wrote is not overwritten."""
    from interp.files.io import read_json

    if path.is_file():
        old = read_json(path)
        if not (isinstance(old, dict) and "analysed_from" in old):
            raise ToolkitError(
                f"{path} holds the results of a command that trained its runs; --analyse-only never overwrites "
                "them - give another --out"
            )


# ----- the options recorded with the runs ---------------------------------------------------------------------

# Options that say where runs and data lie, how runs launch and what the command shows or writes beside its
# results, not which runs and analysis it asks for: never taken from the record (the launcher's are added below).
PLACE_OPTIONS = ("out", "data", "no_progress", "no_report", "analyse_only", "help")
# Options that say what a training command leaves untrained (the floor's --predict-only), not what is analysed.
TRAINING_ONLY = ("predict_only",)


def recorded_command(folder: Path, name: str, preset: str | None) -> tuple[str, str] | None:
    """(the command recorded with the runs in FOLDER, the file that records it), or None where none is: a shipped
    folder's MANIFEST.json (read_shipped refuses one whose results file names another), else the results file of
    experiment `name` in FOLDER or a folder in it (the one of --preset where there are several)."""
    from experiments.shipping.ship import MANIFEST
    from interp.files.io import DataFileError, read_json

    if is_shipped(folder):
        found = [folder / MANIFEST]
    else:
        found = sorted(folder.glob(f"results-{name}.json")) or sorted(folder.glob(f"*/results-{name}.json"))
        if len(found) > 1 and preset is not None:
            found = [p for p in found if p.parent.name == preset] or found
        if len(found) > 1:
            names = ", ".join(str(p.relative_to(folder)) for p in found)
            raise ToolkitError(
                f"--analyse-only {folder} holds the results of several commands ({names}); say which with --preset"
            )
    if not found:
        return None
    record = read_json(found[0])  # a damaged file is refused by name here, not taken for a missing one
    if not isinstance(record, dict):
        raise DataFileError(f"{found[0]} is damaged (not the JSON object it was written as); move it aside to recover")
    command = record.get("command")
    return (command, str(found[0])) if isinstance(command, str) and command else None


class UnknownOption(Exception):
    """A recorded word that is no option of the experiment's parser."""


def _option_chunks(parser: argparse.ArgumentParser, words: list[str]) -> list[tuple[argparse.Action, list[str]]]:
    """words as (the option's action, its words): `--margin 0.1`, `--margin=0.1`, `--no-identity`; a unique prefix
    is the option, as argparse takes it. A word that is no option of the parser raises UnknownOption."""
    known = parser._option_string_actions
    out, i = [], 0
    while i < len(words):
        flag, eq, _ = words[i].partition("=")
        hits = {known[o] for o in known if o.startswith(flag)} if flag.startswith("--") and len(flag) > 2 else set()
        action = known.get(flag) or (hits.pop() if len(hits) == 1 else None)
        if action is None:
            raise UnknownOption(words[i])
        n = 0 if (eq or action.nargs == 0) else 1
        out.append((action, words[i : i + 1 + n]))
        i += 1 + n
    return out


def _set_key(chunk: list[str]) -> str:
    """The KEY of a `--set KEY=VALUE` (or `--set=KEY=VALUE`)."""
    return (chunk[0].partition("=")[2] if len(chunk) == 1 else chunk[1]).split("=", 1)[0].strip()


# What an option resolves to, given the parsed options (effective_options below): {"seeds": the seeds the runs
# train with, "set": {field: value} of the resolved spec, "variants": the variant names planned}; it raises
# ToolkitError on a value the experiment refuses.
Effective = Callable[[argparse.Namespace], dict[str, Any]]


def effective_options(experiment: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What --seeds, --set and --variants resolve to for an Experiment (experiments.runner.frame) with these
    options, after the defaults and the preset (with_recorded_options compares them with the recorded ones'):
    {"seeds": [...], "set": {field: value} of the resolved spec, "variants": the names planned}; a value the
    experiment refuses raises ToolkitError. The plan is made without the corpus (a --variants experiment's plan
    does not read it)."""
    if experiment.check:
        experiment.check(args)
    spec, seeds, _ = experiment.resolved_options(args)
    fields = {f.name: getattr(c, f.name) for c in (spec.model, spec.train) for f in dataclasses.fields(c)}
    values: dict[str, Any] = {"seeds": seeds, "set": fields}
    if experiment.variants_option:
        groups = experiment.plan(Context(args=args, spec=spec, seeds=seeds, out=Path(args.out)))
        if args.variants is not None:
            groups = select_variants(groups, args.variants)
        values["variants"] = [v.name for g in groups for v in g.variants]
    return values


def with_recorded_options(
    parser: argparse.ArgumentParser, argv: list[str], folder: Path, name: str, effective: Effective | None = None
) -> list[str]:
    """The command line --analyse-only analyses with: the options recorded with FOLDER's runs (recorded_command),
    each one given in argv in its place instead (a --set per key), then argv's others. Says in one line which
    options it took, and one line per given option whose effective value (`effective`: after the defaults and
    the preset) is not the recorded one's; an option the parser does not know, or a recorded value it or the
    experiment refuses, is one refusal naming the record. A folder with no command recorded (`python -m
    training`'s --out) takes the preset its runs' config.json record (recorded_preset)."""
    if not folder.is_dir():
        return argv  # Source.open refuses it
    given = _option_chunks(parser, argv)
    preset = next((parser.parse_args(c).preset for a, c in given if a.dest == "preset"), None)
    found = recorded_command(folder, name, preset)
    if found is None:
        return _with_recorded_preset(folder, name, argv, preset)
    command, where = found
    words = shlex.split(command)
    if words[1:3] != ["-m", f"experiments.{name}"]:
        print(f"--analyse-only {folder}: {where} records `{command}`, not experiments.{name}'s: its options not taken")
        return argv
    try:
        recorded = _option_chunks(parser, words[3:])
        parser.parse_args([w for _, c in recorded for w in c])
    except UnknownOption as e:
        raise ToolkitError(
            f"{where} records `{command}`, whose {e} python -m experiments.{name} does not take; analyse it with "
            "the version of the toolkit that wrote it"
        ) from None
    except ToolkitError as e:
        raise ToolkitError(f"{where} records `{command}`, whose options this version refuses: {one_line(e)}") from None
    places = set(PLACE_OPTIONS) | set(TRAINING_ONLY) | _launcher_dests()
    recorded = [(a, c) for a, c in recorded if a.dest not in places]
    merged, used = _merge(recorded, given)
    line = [w for c in merged for w in c] + [w for i, (_, c) in enumerate(given) if i not in used for w in c]
    taken = [w for c in merged if all(c is not g for _, g in given) for w in c]
    place_words = [w for a, c in given if a.dest in places for w in c]
    refused = _effective(effective, parser.parse_args(line))[1]
    if refused and _effective(effective, parser.parse_args(taken + place_words))[1]:  # the recorded values alone fail
        raise ToolkitError(
            f"{where} records `{command}`, whose options this version refuses: {refused} (a value recorded there; "
            "give the option here to analyse with another)"
        )
    if taken:
        print(f"--analyse-only {folder}: the options recorded with its runs ({where}): {shlex.join(taken)}")
    was = parser.parse_args([w for _, c in recorded for w in c] + place_words)
    there = {a.dest for a, _ in recorded}
    for text in _differences(was, parser.parse_args(line), there, given, places, effective):
        print(f"--analyse-only {folder}: {text} ({where}); the given one is used")
    return line


def recorded_preset(folder: Path) -> tuple[list[str], str]:
    """(the presets the runs in FOLDER record, meta.preset of their config.json, sorted; the pattern read): the
    run directories `python -m training` and the experiments write, <preset>/<variant>/seed<k>."""
    from interp.files.io import read_json

    pattern = "*/*/seed*/config.json"
    presets = set()
    for path in sorted(folder.glob(pattern)):
        try:
            meta = read_json(path).get("meta")
        except (OSError, ValueError, AttributeError, ToolkitError):
            continue  # a damaged file: reading the runs refuses it by name
        if isinstance(meta, dict) and isinstance(meta.get("preset"), str):
            presets.add(meta["preset"])
    return sorted(presets), str(folder / pattern)


def _with_recorded_preset(folder: Path, name: str, argv: list[str], given: str | None) -> list[str]:
    """argv for a folder that records no command: the preset its runs record where --preset is not given, one
    refusal naming what to pass where they record none or several."""
    presets, where = recorded_preset(folder)
    if given is not None:
        if presets and given not in presets:
            print(
                f"--analyse-only {folder}: --preset {given} given, {', '.join(presets)} recorded ({where}); "
                "the given one is used"
            )
        return argv
    if len(presets) == 1:
        print(f"--analyse-only {folder}: the preset recorded with its runs ({where}): --preset {presets[0]}")
        return ["--preset", presets[0], *argv]
    records = f"neither a MANIFEST.json nor a results-{name}.json there records one"
    if presets:
        raise ToolkitError(
            f"--analyse-only {folder} records no command ({records}) and holds runs of the presets "
            f"{', '.join(presets)} ({where}); say which with --preset"
        )
    raise ToolkitError(
        f"--analyse-only {folder} records no command ({records}) and no run's config.json there records its "
        f"preset ({where}); give the options the runs trained with, --preset at least"
    )


def _merge(recorded: list, given: list) -> tuple[list[list[str]], set[int]]:
    """The recorded chunks, each in turn replaced by the given ones of its option (for --set, of its key) where
    there are any; (the chunks, the indices of the given chunks placed)."""
    merged: list[list[str]] = []
    used: set[int] = set()
    for action, chunk in recorded:
        hits = [
            i
            for i, (a, c) in enumerate(given)
            if a is action and (action.dest != "set" or _set_key(c) == _set_key(chunk))
        ]
        if not hits:
            merged.append(chunk)
        merged += [given[i][1] for i in hits if i not in used]  # a later recorded one of the same option: dropped
        used.update(hits)
    return merged, used


def _differences(
    was: argparse.Namespace,
    now: argparse.Namespace,
    there: set[str],
    given: list,
    places: set[str],
    effective: Effective | None,
) -> list[str]:
    """One line per option given whose effective value (after the defaults and the preset, where `effective`
    resolves them) is not the recorded one's (the default's where the record leaves it out)."""
    old_eff, new_eff = _effective(effective, was)[0], _effective(effective, now)[0]
    lines = []
    for action in dict.fromkeys(a for a, _ in given if a.dest not in places):
        flag = max(action.option_strings, key=len)
        if action.dest == "set":
            old = dict(i.split("=", 1) for i in was.set if "=" in i)
            new = dict(i.split("=", 1) for i in now.set if "=" in i)
            fields_was, fields_now = old_eff.get("set"), new_eff.get("set")
            for k in dict.fromkeys(_set_key(c) for a, c in given if a is action):
                if k not in new:
                    continue
                resolved = isinstance(fields_was, dict) and isinstance(fields_now, dict) and k in fields_was
                if (fields_was[k] == fields_now.get(k)) if resolved else (old.get(k) == new[k]):
                    continue
                so = f", so {k}={fields_was[k]}" if resolved else ""
                recorded = f"--set {k}={old[k]} recorded" if k in old else f"no --set {k} recorded{so}"
                lines.append(f"--set {k}={new[k]} given, {recorded}")
            continue
        old, new = getattr(was, action.dest), getattr(now, action.dest)
        if action.dest in old_eff and action.dest in new_eff:
            if old_eff[action.dest] == new_eff[action.dest]:
                continue
            default = _shown(old_eff[action.dest], ",")
        elif old == new:
            continue
        else:  # None: the command decides (a preset's seeds, the floor's --law-from): --help says how
            default = "the command's own (see --help)" if old is None else _shown(old)
        if action.nargs == 0:
            lines.append(f"{flag} given, not in the recorded command")
        elif action.dest in there:
            lines.append(f"{flag} {_shown(new)} given, {_shown(old)} recorded")
        else:
            lines.append(f"{flag} {_shown(new)} given; the recorded command leaves it at its default, {default}")
    return lines


def _effective(effective: Effective | None, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(effective(args), or {} (the options compared as parsed) where there is none or it refuses a value;
    what the experiment says refusing these options (effective raising ToolkitError), else "")."""
    try:
        return (effective(args) if effective is not None else {}), ""
    except ToolkitError as e:
        return {}, one_line(e)


def _shown(value: Any, sep: str = " ") -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        if sep != " ":
            return shlex.quote(sep.join(map(str, value))) if value else "none"
        return shlex.join(map(str, value)) or "none"
    return shlex.quote(str(value))


def _launcher_dests() -> set[str]:
    from experiments.cluster.launch import add_launcher_arguments

    p = argparse.ArgumentParser(add_help=False)
    add_launcher_arguments(p)
    return {a.dest for a in p._actions}
