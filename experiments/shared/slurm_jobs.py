"""What Slurm says of a sweep's jobs, on one line each: sbatch's refusal (the option it most likely refused),
which recorded jobs are still queued (waited for, not submitted again), and --collect's account of each
unfinished run's job (experiments.shared.launch submits; experiments.shared.job_record keeps the record)."""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.shared import slurm_watch
from experiments.shared.job_record import JobRecord, run_key
from experiments.shared.plan import Context, Job
from experiments.shared.wait_jobs import SweepIncomplete
from interp.errors import ToolkitError, escape_controls, one_line


def refused_line(args: argparse.Namespace, error: BaseException) -> str:
    """sbatch's refusal on one line: the option to check first (matched on Slurm's words) and what it said."""
    text = str(error)
    said = [line.strip() for line in text.splitlines() if "error" in line.lower()] or [one_line(error)]
    said = list(dict.fromkeys(said))  # sbatch repeats itself
    low = text.lower()
    suspects = []
    if "partition" in low:
        suspects.append(
            f"--slurm-partition {args.slurm_partition}" if args.slurm_partition else "the default partition"
        )
    if args.gpus_per_run and ("gres" in low or "generic resource" in low or "gpu" in low):
        suspects.append(f"--gpus-per-run {args.gpus_per_run}")
    if "time limit" in low:
        suspects.append(f"--slurm-time {args.slurm_time}")
    for item in args.slurm_set:
        key = item.split("=", 1)[0].strip().removeprefix("slurm_")
        if key and (f"--{key}" in low or f" {key}" in low or key.replace("_", " ") in low):
            suspects.append(f"--slurm-set {item}")
    given = suspects or [f"--slurm-set {item}" for item in args.slurm_set]
    check = f" (check {', '.join(given)})" if given else ""
    return f"Slurm refused the submission{check}: {escape_controls('; '.join(said))}"


def queued_earlier(record: JobRecord, todo: list[Job], out: Path, folder: Path) -> list:
    """(job, submitit job) of each run whose job of an earlier submission squeue still lists (pending or
    running): waited for, not submitted again. A job gone from the queue is not: its run is resubmitted."""
    from submitit.slurm.slurm import SlurmJob

    runs = record.load()
    ids = {id(job): runs[k]["job"] for job in todo if (k := run_key(job.run_dir(out).path, out)) in runs}
    if not ids:
        return []
    try:
        live = slurm_watch.queued(sorted(set(ids.values())))
    except slurm_watch.SlurmUnreachable as e:
        shown = ", ".join(sorted(set(ids.values())))
        raise ToolkitError(
            f"cannot tell whether this sweep's earlier jobs ({shown}) are still queued: {e}; "
            "run the command again once Slurm answers (it would otherwise submit their runs twice)"
        ) from None
    return [(job, SlurmJob(folder=folder, job_id=ids[id(job)])) for job in todo if ids.get(id(job)) in live]


def unfinished_refusal(ctx: Context, todo: list[Job]) -> ToolkitError:
    """--collect with runs unfinished: what each one's job is doing, as Slurm says (from the sweep's job record).
    Every job gone without a result: SweepIncomplete (the finished runs are aggregated, exit 3, the command that
    resumes the rest). One still queued or running, or a run no job of this sweep trains: refused (exit 2)."""
    names = {id(j): f"{j.variant.name} seed {j.seed}" for j in todo}
    runs = JobRecord(ctx.result_dir.resolve() / ".submitit").load()
    ids = {id(j): runs[k] for j in todo if (k := run_key(j.run_dir(ctx.out).path, ctx.out)) in runs}
    if not ids:
        return ToolkitError(
            f"{len(todo)} run(s) not finished yet: {', '.join(names.values())}; "
            "wait for their jobs or run without --collect"
        )
    try:
        live = slurm_watch.queued(sorted({r["job"] for r in ids.values()}))
    except slurm_watch.SlurmUnreachable as e:
        return ToolkitError(
            f"{len(todo)} run(s) not finished yet: {', '.join(names.values())}; and Slurm does not say whether "
            f"their jobs still run ({e})"
        )
    gone = sorted({r["job"] for r in ids.values()} - set(live))
    ended = slurm_watch.ended(gone) if gone else {}
    parts, commands = [], []
    for job in todo:
        entry = ids.get(id(job))
        if entry is None:
            parts.append(f"{names[id(job)]}: no job of this sweep trains it")
        elif entry["job"] in live:
            q = live[entry["job"]]
            why = f" ({q.reason})" if q.state == "PENDING" and q.reason not in ("", "None") else ""
            parts.append(f"{names[id(job)]} (job {entry['job']}): {q.state.lower()}{why}")
        else:
            end = ended[entry["job"]]
            parts.append(
                f"{names[id(job)]} (job {entry['job']}): left the queue without a result: {end.state} ({end.said})"
            )
            commands.append(entry["command"])
    resume = " or ".join(dict.fromkeys(commands))
    if len(commands) == len(todo):
        for part in parts:  # said as the waiting command says them: the frame aggregates the rest below
            print(f"not finished: {part}")
        return SweepIncomplete(
            f"{len(todo)} run(s) have no result and their jobs are gone: {'; '.join(parts)}. The finished runs are "
            f"kept; the others resume from their last checkpoints with: {resume}",
            todo,
        )
    rest = f"; resume the gone ones with: {resume} (it waits for the queued ones)" if commands else ""
    return ToolkitError(
        f"{len(todo)} run(s) not finished yet: {'; '.join(parts)}; wait for the queued or running ones{rest}"
    )


if __name__ == "__main__":  # a library module: says so instead of exiting 0 doing nothing
    from experiments.shared.options import not_a_command

    raise SystemExit(not_a_command(__spec__.name))
