"""What Slurm says of a sweep's jobs, on one line each: sbatch's refusal (the option it most likely refused),
which recorded jobs are still queued (waited for, not submitted again), the jobs a submission interrupted inside
sbatch queued without recording them (found by its job name, recorded and waited for), and --collect's account of
each unfinished run's job (experiments.cluster.launch submits; experiments.cluster.job_record keeps the record)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from experiments.cluster import slurm_watch
from experiments.cluster.job_record import JobRecord, run_key
from experiments.cluster.wait_jobs import SweepIncomplete
from experiments.shared.plan import Context, Job
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


def submission_entry(job_name: str, module: str, command: str, job_argv: list[str], todo: list[Job], ctx) -> dict:
    """What the job record keeps of a submission while sbatch runs (JobRecord.begin): its job name, and what each
    task of its array runs (job_main's arguments), in order: enough to find its jobs and give each its job file."""
    args = ctx.args
    return {
        "name": job_name,
        "command": command,
        "module": module,
        "argv": job_argv,
        "gpus": int(args.gpus_per_run),
        "timeout_min": int(args.slurm_time),
        "max_num_timeout": 3,  # submitit's executor default: the countdown job_main's time-limit signal ignores
        "runs": [
            {"key": run_key(j.run_dir(ctx.out).path, ctx.out), "preset": j.group.spec.preset,
             "variant": j.variant.name, "seed": j.seed}
            for j in todo
        ],
    }  # fmt: skip


def interrupted_line(job_name: str) -> str:
    """What the interrupt line says of a submission interrupted inside sbatch (the frame prints it)."""
    return (
        f"sbatch was interrupted: jobs it may have queued are named {job_name} (squeue --name={job_name}), and the "
        "same command finds them, records them and waits for them instead of submitting their runs again"
    )


def found_after_interrupt(record: JobRecord, folder: Path, job_main: Callable[..., str]) -> list[str]:
    """The jobs an earlier submission interrupted inside sbatch queued without recording them (squeue by its job
    name): each gets the job file submitit would have written after sbatch (the pickle it waits for), and is
    recorded as its run's job, so the runs are waited for, not submitted twice. Their ids; none queued: [].
    job_main: what each job runs (experiments.cluster.launch.job_main, which submits through this module)."""
    pending = record.pending()
    if pending is None:
        return []
    name, runs = pending["name"], pending["runs"]
    try:
        live = slurm_watch.named(name)
    except slurm_watch.SlurmUnreachable as e:
        raise ToolkitError(
            f"a submission into {folder} was interrupted inside sbatch, and whether it queued jobs (named {name}) "
            f"cannot be told: {e}; run the command again once Slurm answers (it would otherwise submit their runs "
            "twice)"
        ) from None
    tasks = {job: _task(job, len(runs)) for job in sorted(live, key=_order)}
    strays = [job for job, task in tasks.items() if task is None]
    if strays:
        raise ToolkitError(
            f"job(s) {' '.join(strays)} named {name}, queued by a submission into {folder} interrupted inside "
            f"sbatch, are not the {len(runs)} task(s) it recorded; cancel them (`scancel {' '.join(strays)}`) and "
            "run the command again"
        )
    for job, task in tasks.items():
        _job_file(pending, runs[task], folder, job, job_main)
    record.add({runs[task]["key"]: {"job": job, "command": pending["command"]} for job, task in tasks.items()})
    return list(tasks)


def _order(job_id: str) -> list[int]:
    return [int(x) for x in job_id.split("_") if x.isdigit()]


def _task(job_id: str, n: int) -> int | None:
    """Which run of the submission job_id trains: task i of its array ("123_4"), or the lone job of a one-run
    submission ("123", which submitit submits without an array); None for anything else."""
    head, _, task = job_id.partition("_")
    if not head.isdigit():
        return None
    if not task:
        return 0 if n == 1 else None
    return int(task) if task.isdigit() and n > 1 and int(task) < n else None


def _job_file(pending: dict, run: dict, folder: Path, job_id: str, job_main: Callable[..., str]) -> None:
    """The pickle submitit writes for a job once sbatch answers (and the job waits a minute for at its start):
    job_main with the submission's arguments, as experiments.cluster.launch.sbatch submits it."""
    import os

    from submitit.core.utils import DelayedSubmission
    from submitit.slurm.slurm import SlurmJob

    target = SlurmJob(folder=folder, job_id=job_id).paths.submitted_pickle
    if target.exists():  # the interrupt came after sbatch answered: submitit wrote it
        return
    args = (pending["module"], pending["argv"], run["preset"], run["variant"], run["seed"], pending["gpus"])
    delayed = DelayedSubmission(job_main, *args)
    delayed.set_timeout(pending["timeout_min"], pending["max_num_timeout"])
    tmp = target.with_name(f".{target.name}.tmp")
    delayed.dump(tmp)
    os.replace(tmp, target)  # whole or absent: the job may be reading it already


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
