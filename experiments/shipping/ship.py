"""Ship an experiment's results into the repository, and read a shipped folder back (issue 45).

    python -m experiments.shipping.ship SOURCE DEST [--experiment NAME] [--command TEXT]

SOURCE is an experiment's --out (or its <out>/<preset> folder) holding results-<experiment>.json; DEST is the
folder to write, one per published command (docs/results/data/<experiment>-<label>/):

    DEST/results-<experiment>.json  the results file the command wrote (run_dir relative to its folder)
    DEST/runs.tar.xz                every run the results list: config.json, metrics.jsonl, probes.jsonl and
                                    final.json under <preset>/<variant>/seed<k>/ (paths relative to --out);
                                    never ckpt.pt, locks, snapshots or reports
    DEST/<record files>             what the experiment's analysis reads beside its runs, from its results folder
                                    (RECORD_FILES: predictions written before the runs trained)
    DEST/MANIFEST.json              the command, sha256 and bytes of each file and of each archived run file,
                                    and how each run was checked before shipping: "checkpoint" (its logs and
                                    final.json are the ones its ckpt.pt records) or "logs" (no ckpt.pt: whole
                                    logs that end with final.json's evaluation); an --analyse-only of a
                                    shipped folder keeps the check each run was shipped with where its files
                                    are the ones that folder lists

The archive is deterministic (members sorted, mtime 0, owner root, mode 0644, xz without a timestamp), so
shipping the same runs again writes the same bytes. `python -m experiments.<name> <the command's options>
--analyse-only DEST --out <elsewhere>` re-analyses it without training (experiments.runner.analyse_only).

A shipped folder holds one command, the one whose options re-derive it: MANIFEST.json's and its results file's
are the same (read_shipped refuses a folder where they differ). It is the command the results record; --command
may not rename it (issue 50: escape_time-smoke's MANIFEST named another --out than its results). --command gives
it only where the results record none (files written before results did) or were written by --analyse-only
(their "command" names the analysing --out): then it must be the command that trained the runs, the same
options but for --out, --no-progress, --no-report and the launcher's, and the shipped results name it too.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from interp.errors import ToolkitError

SCHEMA = "shipped-results/1"
ARCHIVE = "runs.tar.xz"
MANIFEST = "MANIFEST.json"
RUN_FILES = ("config.json", "metrics.jsonl", "probes.jsonl", "final.json")  # probes.jsonl: absent without probes
REQUIRED = ("config.json", "metrics.jsonl", "final.json")
# experiment -> files of its results folder its analysis reads beside the runs (experiments.floor: the knob's
# predictions, written before its arms trained; --analyse-only copies them back)
RECORD_FILES = {"floor": ("predictions-floor.json", "predictions-law.json")}


class ShipError(ToolkitError):
    """A folder that cannot be shipped, or a shipped folder that is not what its MANIFEST.json says."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_path(results_dir: str | Path, run_dir: str) -> Path:
    """A results file's run_dir as a path: relative to the results file's folder (absolute in files written
    before issue 45, which Path joining keeps as they are)."""
    return Path(results_dir) / run_dir


# ----- shipping ---------------------------------------------------------------------------------------------


def find_results(source: Path, experiment: str | None) -> Path:
    """The one results-<experiment>.json in SOURCE or its subfolders one level down."""
    pattern = f"results-{experiment}.json" if experiment else "results-*.json"
    found = sorted(source.glob(pattern)) or sorted(source.glob(f"*/{pattern}"))
    if not found:
        raise ShipError(f"{source} holds no {pattern} (nor does any folder in it); give an experiment's --out")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(source)) for p in found)
        raise ShipError(f"{source} holds several results files ({names}); name one with --experiment")
    return found[0]


def tar_xz(files: dict[str, bytes]) -> bytes:
    """A deterministic .tar.xz of files {posix path: bytes}: sorted, no times, no owners."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", format=tarfile.PAX_FORMAT, preset=9) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    return buffer.getvalue()


def check_run(run_dir: Path) -> str:
    """How a run was checked before shipping: against its checkpoint where it has one, else its logs alone."""
    from training.rundir import RunDir

    run = RunDir(run_dir)
    config = run.read_config()
    if config is None or not run.finished:
        raise ShipError(f"{run_dir} is not a finished run (no config.json or final.json); it is never shipped")
    if run.ckpt.is_file():
        run.verify_finished(config)  # final.json and the logs' sha256 are the ones the checkpoint records
        return "checkpoint"
    run.load_logs(config)
    return "logs"


def missing_files(files: dict[str, bytes]) -> list[str]:
    """The logged files a run must have that `files` {name: bytes} lacks: REQUIRED, and probes.jsonl where its
    config.json says it was probed (shipped without it, the probe-reading analyses would drop it unsaid)."""
    import json

    try:
        probed = bool((json.loads(files["config.json"]).get("train") or {}).get("probes"))
    except (KeyError, ValueError, AttributeError):
        probed = False  # no readable config.json: REQUIRED names it
    return [n for n in REQUIRED + ("probes.jsonl",) * probed if n not in files]


def check_entry(run_dir: Path, entry: dict[str, Any]) -> None:
    """The results' entry is the run in its run_dir: the same seed and final loss (a run directory holding
    another run's files would otherwise ship under this entry's name, and be found only on re-analysis)."""
    from interp.files.io import read_json

    config, final = read_json(run_dir / "config.json"), read_json(run_dir / "final.json")
    have = {"seed": (config.get("train") or {}).get("seed"), "final_val_loss": final.get("final_val_loss")}
    for key, value in have.items():
        if key in entry and entry[key] != value:
            raise ShipError(
                f"{run_dir} is not the run the results list there: its {key} is {value}, the results say "
                f"{entry[key]}; ship the folder the results were written from"
            )


def collect(results_path: Path) -> tuple[dict[str, Any], bytes, dict[str, bytes], dict[str, str]]:
    """(results, the results file's bytes as shipped, archive members, how each run was checked)."""
    from interp.files.io import dumps, read_json

    results_dir = results_path.parent
    out = results_dir.parent  # results sit in <out>/<preset>
    results = read_json(results_path)
    runs = results.get("runs") if isinstance(results, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("run_dir"), str) for r in runs):
        raise ShipError(f"{results_path} lists no runs with a run_dir; it is not an experiment's results file")
    members: dict[str, bytes] = {}
    checked: dict[str, str] = {}
    rewritten = False
    for r in runs:
        path = run_path(results_dir, r["run_dir"])
        if Path(r["run_dir"]).is_absolute():  # written before run_dir was relative (issue 45)
            if not path.is_dir() and (out / Path(*path.parts[-3:])).is_dir():  # the folder moved since
                path = out / Path(*path.parts[-3:])
            rel_dir = os.path.relpath(path, results_dir)
            r["run_dir"], rewritten = rel_dir, True
        rel = PurePosixPath(Path(os.path.relpath(path, out)).as_posix())
        if rel.parts[:1] == ("..",) or rel.is_absolute():
            raise ShipError(f"run {path} is not inside the experiment's folder {out}; ship from the folder it is in")
        if str(rel) in checked:
            continue
        checked[str(rel)] = check_run(path)
        files = {n: (path / n).read_bytes() for n in RUN_FILES if (path / n).is_file()}
        lacks = missing_files(files)
        if lacks:
            raise ShipError(f"{path} lacks {', '.join(lacks)}, which its config.json says it wrote; never shipped")
        check_entry(path, r)
        members.update({f"{rel}/{name}": data for name, data in files.items()})
    text = results_path.read_bytes()
    if rewritten:
        text = (dumps(results, results_path, indent=2) + "\n").encode()
    return results, text, members, checked


def the_command(results_path: Path, results: dict[str, Any], given: str | None) -> str:
    """The one command a shipped folder holds, the one whose options re-derive it: the command its results record
    (--command may repeat it, never rename it); for results written before results recorded one, --command; for
    results an --analyse-only wrote, --command, the command that trained the runs - the recorded one but for --out."""
    recorded = results.get("command")
    if results.get("analysed_from"):  # its "command" names the analysing --out, which never trained these runs
        if not given:
            raise ShipError(
                f"{results_path} was analysed with --analyse-only from {results['analysed_from']}: its runs were "
                "trained by another command; give that one with --command (a shipped folder's MANIFEST.json records it)"
            )
        if isinstance(recorded, str) and _options(given) != _options(recorded):
            raise ShipError(
                f"--command `{given}` is not the options {results_path} was analysed with (`{recorded}`); give the "
                "command that trained its runs, which differs from that one in --out alone"
            )
        return given
    if not isinstance(recorded, str) or not recorded:
        if not given:
            raise ShipError(
                f"{results_path} does not record its command (written before results did); give it with --command"
            )
        return given
    if given and given != recorded:
        raise ShipError(
            f"--command `{given}` is not the command {results_path} records (`{recorded}`): a shipped folder holds one "
            "command, the one that wrote its results; leave --command out"
        )
    return recorded


def _options(command: str) -> list[str]:
    """A command's words less those that say where its runs lie (--out), how they launch, or what it shows and
    writes beside its results (--no-progress, --no-report): what is left says which runs and analysis it asks."""
    import argparse
    import shlex

    from experiments.cluster.launch import add_launcher_arguments

    words = shlex.split(command)
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("--out")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-report", action="store_true")
    add_launcher_arguments(p)
    try:
        return p.parse_known_args(words)[1]
    except (argparse.ArgumentError, SystemExit):  # an option it cannot read: the words as they are
        return words


def ship(source: Path, dest: Path, experiment: str | None = None, command: str | None = None) -> dict[str, Any]:
    """Write DEST (module docstring) from the results in SOURCE; returns the manifest."""
    from interp.files.io import atomic_write, dumps, write_json

    results_path = find_results(source, experiment)
    results, text, members, checked = collect(results_path)
    command = the_command(results_path, results, command)
    if results.get("command") != command:  # the folder holds one command: its results file names it too
        results["command"] = command
        text = (dumps(results, results_path, indent=2) + "\n").encode()
    if dest.resolve() == results_path.parent.resolve() or dest.resolve() in results_path.parent.resolve().parents:
        raise ShipError(f"{dest} holds the experiment's own folder; ship into another folder")
    checked = carried_checks(results, members, checked)
    files = {results_path.name: text, ARCHIVE: tar_xz(members)}
    for record in RECORD_FILES.get(str(results.get("experiment")), ()):
        if (results_path.parent / record).is_file():
            files[record] = (results_path.parent / record).read_bytes()
    manifest = {
        "schema": SCHEMA,
        "experiment": results.get("experiment"),
        "preset": results.get("preset"),
        "command": command,
        "files": {k: {"sha256": sha256(v), "bytes": len(v)} for k, v in sorted(files.items())},
        "runs": dict(sorted(checked.items())),
        "members": {k: {"sha256": sha256(v), "bytes": len(v)} for k, v in sorted(members.items())},
    }
    stale = clear_for(dest, set(files), str(results.get("experiment")))
    dest.mkdir(parents=True, exist_ok=True)
    for file, data in files.items():
        atomic_write(dest / file, lambda tmp, data=data: Path(tmp).write_bytes(data))
    write_json(dest / MANIFEST, manifest)
    for path in stale:  # an earlier shipment's files this one does not write (another results file, a record)
        path.unlink()
    return manifest


def carried_checks(results: dict[str, Any], members: dict[str, bytes], checked: dict[str, str]) -> dict[str, str]:
    """How each run was checked, where the results are an --analyse-only of a shipped folder: a run whose files
    are byte for byte those that folder's MANIFEST.json lists keeps the check it was shipped with (its checkpoint
    stayed where it trained; the copy analysed is what was checked against it). Any other run: as checked here."""
    from interp.files.io import read_json

    source = results.get("analysed_from")
    try:
        earlier = read_json(Path(source) / MANIFEST) if isinstance(source, str) else {}
        listed, before = dict(earlier.get("members") or {}), dict(earlier.get("runs") or {})
    except (OSError, ValueError, AttributeError, TypeError, ToolkitError):
        return checked
    out = dict(checked)
    for run in checked:
        mine = {k: sha256(v) for k, v in members.items() if k.startswith(f"{run}/")}
        theirs = {k: v.get("sha256") for k, v in listed.items() if k.startswith(f"{run}/") and isinstance(v, dict)}
        if mine and mine == theirs and before.get(run) in ("checkpoint", "logs"):
            out[run] = before[run]
    return out


def clear_for(dest: Path, writing: set[str], experiment: str) -> list[Path]:
    """The files of DEST a new shipment replaces (DEST absent or empty: none). DEST may hold only an earlier
    shipment of the same experiment, every file named by its MANIFEST.json: anything else is refused, never
    mixed into the new folder (a folder holds one command), nor deleted."""
    if not dest.exists():
        return []
    if not dest.is_dir():
        raise ShipError(f"{dest} is a file; ship into a folder")
    present = {p.name for p in dest.iterdir()}
    if not present:
        return []
    from interp.files.io import read_json

    try:
        earlier = read_json(dest / MANIFEST) if MANIFEST in present else {}
        listed, before = set(earlier.get("files") or {}), earlier.get("experiment")
    except (OSError, ValueError, AttributeError, ToolkitError):
        listed, before = set(), None
    if MANIFEST in present and before != experiment:
        raise ShipError(f"{dest} holds a shipment of {before!r}, not {experiment!r}: ship into another folder")
    strays = sorted(present - listed - {MANIFEST})
    if MANIFEST not in present or strays:
        what = ", ".join(strays[:3]) if strays else "files but no MANIFEST.json"
        raise ShipError(
            f"{dest} holds {what}, not an earlier shipment's: ship into an empty or new folder "
            "(a shipped folder holds one command's files only)"
        )
    return [dest / name for name in sorted(listed - writing)]


# ----- reading a shipped folder back -------------------------------------------------------------------------


@dataclass(frozen=True)
class Shipped:
    """A shipped folder, checked against its MANIFEST.json."""

    path: Path
    manifest: dict[str, Any]
    results_path: Path
    members: dict[str, bytes]  # "<preset>/<variant>/seed<k>/<file>" -> bytes


def is_shipped(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def read_shipped(folder: Path) -> Shipped:
    """The shipped folder's results file and run files, each compared with MANIFEST.json's sha256: an edited,
    missing or extra file is refused by name."""
    from interp.files.io import read_json

    manifest = read_json(folder / MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise ShipError(f"{folder / MANIFEST} is not a shipped folder's manifest (schema {SCHEMA!r})")
    files, listed = manifest.get("files") or {}, manifest.get("members") or {}
    if not all(isinstance(m, dict) and all(isinstance(v, dict) for v in m.values()) for m in (files, listed)):
        raise ShipError(f"{folder / MANIFEST} is damaged: its files and members are not name -> {{sha256, bytes}}")
    for name, want in files.items():
        data = (folder / name).read_bytes() if (folder / name).is_file() else None
        if data is None or sha256(data) != want.get("sha256"):
            raise ShipError(f"{folder / name} is {'missing' if data is None else 'not the file shipped'} (sha256)")
    extra = sorted(p.name for p in folder.iterdir() if p.name not in files and p.name != MANIFEST)
    if extra:  # a second results file beside the listed one would be a second command
        raise ShipError(f"{folder} holds {', '.join(extra[:3])}, which {MANIFEST} does not list; ship the folder again")
    results = [n for n in files if n.startswith("results-") and n.endswith(".json")]
    if len(results) != 1 or ARCHIVE not in files:
        raise ShipError(f"{folder / MANIFEST} names no results file and {ARCHIVE}")
    recorded = read_json(folder / results[0])
    recorded = recorded.get("command") if isinstance(recorded, dict) else None
    if recorded != manifest.get("command"):
        raise ShipError(
            f"{folder} holds two commands: {MANIFEST}'s `{manifest.get('command')}` and {results[0]}'s `{recorded}`; "
            "a shipped folder holds one, the one that re-derives it: ship it again "
            "(python -m experiments.shipping.ship)"
        )
    members = {}
    try:
        with tarfile.open(folder / ARCHIVE, mode="r:xz") as tar:
            for info in tar.getmembers():
                name = PurePosixPath(info.name)
                if not info.isfile() or name.is_absolute() or ".." in name.parts:
                    raise ShipError(f"{folder / ARCHIVE} holds {info.name!r}, not a run file")
                handle = tar.extractfile(info)
                members[str(name)] = handle.read() if handle else b""
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:  # its sha256 matched: the MANIFEST lists a bad archive
        raise ShipError(f"{folder / ARCHIVE} is not a readable .tar.xz ({e}); ship the folder again") from None
    wrong = sorted(
        n for n in set(listed) | set(members) if sha256(members.get(n, b"")) != listed.get(n, {}).get("sha256")
    )
    if wrong:
        raise ShipError(f"{folder / ARCHIVE}: {wrong[0]} is not the file MANIFEST.json lists ({len(wrong)} differ)")
    return Shipped(folder, manifest, folder / results[0], members)


INTERRUPTED = "the folder is a shipment only once MANIFEST.json is written: empty it and ship again"


def main(argv: list[str] | None = None) -> int:
    """The command: one `error:` line and 2 for a refusal; --help and the summary line through guarded_output."""
    from interp.command.cli import command_main, guarded_output

    argv = sys.argv[1:] if argv is None else argv
    return guarded_output(lambda: command_main(lambda: _main(argv), INTERRUPTED))


def _main(argv: list[str]) -> int:
    from interp.command.cli import Parser

    p = Parser(
        prog="python -m experiments.shipping.ship",
        description=__doc__.split("\n\n", 1)[0],
        epilog="the folder's layout: docs/experiments.md, 'Shipped results and re-analysis'",
    )
    p.add_argument("source", help="the experiment's --out (or its <out>/<preset> folder) holding its results file")
    p.add_argument("dest", help="the folder to write, e.g. docs/results/data/escape_time-default")
    p.add_argument("--experiment", help="which results-<experiment>.json, where SOURCE holds several")
    p.add_argument("--command", help="the command that wrote the results (default: the one the results record)")
    args = p.parse_args(argv)
    manifest = ship(Path(args.source), Path(args.dest), args.experiment, args.command)
    sizes = {name: f["bytes"] for name, f in manifest["files"].items()}
    by = {k: list(manifest["runs"].values()).count(k) for k in ("checkpoint", "logs")}
    print(
        f"shipped {len(manifest['runs'])} runs of {manifest['experiment']} ({by['checkpoint']} checked against "
        f"their checkpoint, {by['logs']} by their logs alone) to {args.dest}: {sum(sizes.values()) / 2**20:.2f} "
        f"MiB ({', '.join(f'{name} {size:,} B' for name, size in sizes.items())})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
