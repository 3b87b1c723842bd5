"""--analyse-only: an experiment's analysis on logged runs, without their checkpoints and without training.

    python -m experiments.<name> <the command's options> --analyse-only SOURCE --out OUT

SOURCE is a shipped folder (experiments.shared.ship: its files checked against MANIFEST.json) or an
experiment's --out whose runs are there with or without ckpt.pt. Every run the command plans is looked up in
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

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.shared.plan import Context, Job
from experiments.shared.ship import RUN_FILES, Shipped, is_shipped, missing_files, read_shipped
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
    from experiments.shared.ship import RECORD_FILES

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
    from experiments.shared.launch import run_config
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
    from interp.io import read_json

    if path.is_file():
        old = read_json(path)
        if not (isinstance(old, dict) and "analysed_from" in old):
            raise ToolkitError(
                f"{path} holds the results of a command that trained its runs; --analyse-only never overwrites "
                "them - give another --out"
            )


if __name__ == "__main__":  # a library module: says so instead of exiting 0 doing nothing
    from experiments.shared.options import not_a_command

    raise SystemExit(not_a_command(__spec__.name))
