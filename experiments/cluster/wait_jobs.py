"""Waiting for a sweep's cluster jobs (experiments.cluster.launch submits them): one progress line, and a job
that dies said at once.

A job that failed or left the queue without a result is said within two polls: its run, what Slurm said
(experiments.cluster.slurm_watch: squeue, then sacct, else scontrol, so accounting may be off) and its log.
The others are waited for; then SweepIncomplete names them all with the command that resumes them, and
the frame aggregates the finished runs and exits 3.

Result files are read on every poll, so the wait ends when every job has written its result even while
squeue fails; a Slurm that does not answer for UNREACHABLE_LIMIT_S in a row ends the wait the same way (exit
3, the runs without a result named). Ctrl-C or SIGTERM ends only the waiting: the jobs go on (an ssh session
that drops must not cancel hours of cluster work); the interrupt carries the ids still queued and the
scancel line that stops them (jobs_left, said by the frame), and the same command waits for them again.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path

from experiments.cluster import slurm_watch
from experiments.shared.plan import Job
from interp.command.progress import progress_bar
from interp.errors import ToolkitError

# A job gone from squeue and without a result is lost on this many polls in a row: its result file may
# land a moment after the job leaves the queue (a shared filesystem's lag).
LOST_AFTER_POLLS = 2
# squeue failing this long in a row (a controller that does not come back, squeue missing) ends the wait.
UNREACHABLE_LIMIT_S = 300.0


class SweepIncomplete(ToolkitError):
    """Some runs' jobs ended without finishing them: the finished ones are kept (and aggregated by the
    frame), the rest resume from their checkpoints when the same command runs again."""

    exit_code = 3

    def __init__(self, message: str, unfinished: list[Job]):
        super().__init__(message)
        self.unfinished = unfinished


class _Sweep:
    """The jobs still waited for, and what became of the others."""

    def __init__(self, submitted: list, out: Path, cluster: str, bar, unreachable_limit_s: float):
        self.pending, self.out, self.cluster, self.bar = list(submitted), out, cluster, bar
        self.failed: list[str] = []
        self.unfinished: list[Job] = []
        self.gone: dict[str, int] = {}
        self.unreachable_limit_s = unreachable_limit_s
        self.unreachable_since: float | None = None
        self.gave_up = ""  # why the wait ended before every job did (Slurm stopped answering)

    def fail(self, job: Job, why: str) -> None:
        line = f"{job.variant.name} seed {job.seed}{why}"
        self.failed.append(line)
        self.unfinished.append(job)
        self.bar.write(f"not finished: {line}")

    def poll(self) -> str:
        """One look at every pending job; returns the progress line's tail."""
        live: dict[str, slurm_watch.Queued] | None = None
        unreachable = None
        ids = [sub.job_id for _, sub in self.pending if sub is not None]
        if self.cluster == "slurm" and ids:
            try:  # asked before the result files are looked at: a job gone here has written its result
                live = slurm_watch.queued(ids)
                self.unreachable_since = None
            except slurm_watch.SlurmUnreachable as e:  # the result files still say which jobs are done
                unreachable = e
                if self.unreachable_since is None:
                    self.unreachable_since = time.monotonic()
        still, lost = [], []
        for job, sub in self.pending:
            run = job.run_dir(self.out)
            if sub is None:
                if run.busy():
                    still.append((job, sub))
                    continue
                self.bar.update(1)
                if not run.finished:
                    self.fail(job, ": its trainer (another process) stopped before finishing")
            elif sub.paths.result_pickle.exists() or (self.cluster != "slurm" and sub.done()):
                self.bar.update(1)
                if sub.exception() is not None:
                    self.fail(job, f" (job {sub.job_id}): raised an error, log {sub.paths.stderr}")
            elif live is not None and sub.job_id not in live:
                self.gone[sub.job_id] = self.gone.get(sub.job_id, 0) + 1
                (lost if self.gone[sub.job_id] >= LOST_AFTER_POLLS else still).append((job, sub))
            else:
                if live is not None:
                    self.gone.pop(sub.job_id, None)
                still.append((job, sub))
        self.pending = still
        self.say_lost(lost)
        if unreachable is None or not self.pending:
            return _counts(self.pending, live)
        waited = time.monotonic() - (self.unreachable_since or 0.0)
        if waited < self.unreachable_limit_s:
            return f"{unreachable} (asking again; giving up in {self.unreachable_limit_s - waited:.0f}s)"
        self.gave_up = f"Slurm did not answer for {waited:.0f}s ({unreachable}), so the wait ended"
        for job, sub in self.pending:
            self.failed.append(f"{job.variant.name} seed {job.seed}" + (f" (job {sub.job_id})" if sub else ""))
            self.unfinished.append(job)
        self.pending = []
        return ""

    def jobs_left(self) -> str:
        """The interrupt's words on the jobs it leaves running: which are still queued (squeue) and how to stop
        them; "" where none is (or the executor is submitit's local one, whose jobs are this machine's)."""
        ids = [sub.job_id for _, sub in self.pending if sub is not None and not sub.paths.result_pickle.exists()]
        if self.cluster != "slurm" or not ids:
            return ""
        try:
            listed = slurm_watch.queued(ids)
            ids, maybe = [j for j in ids if j in listed], ""
        except (slurm_watch.SlurmUnreachable, KeyboardInterrupt):  # cannot tell (or a second Ctrl-C): all
            maybe = " (Slurm did not answer: they may be)"
        if not ids:
            return ""
        return (
            f"{len(ids)} Slurm job(s) are still queued or running{maybe}, not cancelled: {' '.join(ids)}; "
            f"stop them with `scancel {' '.join(ids)}`, or wait for them again (nothing is resubmitted) with"
        )

    def say_lost(self, lost: list) -> None:
        said = slurm_watch.ended([sub.job_id for _, sub in lost]) if lost else {}
        for job, sub in lost:
            self.bar.update(1)
            end = said[sub.job_id]
            stepd = slurm_watch.stepd_said(sub.paths.stderr)
            self.fail(
                job,
                f" (job {sub.job_id}) left the queue without a result: {end.state} "
                f"({end.said}{'; ' + stepd if stepd else ''}); log {sub.paths.stderr}",
            )


def wait(
    submitted: list,
    out: Path,
    progress: bool,
    poll_s: float = 2.0,
    cluster: str = "slurm",
    resume: str = "",
    unreachable_limit_s: float = UNREACHABLE_LIMIT_S,
) -> None:
    """Block until every job ends, with one progress line; raise SweepIncomplete if any did not finish its run.

    submitted: (job, submitit job) pairs; a (job, None) pair is a run some other process trains, done when
    its lock is free. Slurm's jobs are watched with squeue, then sacct or scontrol, not through submitit's
    watcher: that one asks sacct only, which fails where accounting is off, so it never saw a cancelled,
    killed or out-of-memory job end (and warned on every poll).
    """
    bar = progress_bar(total=len(submitted), desc="jobs", unit="job", on=progress, leave=True)
    sweep = _Sweep(submitted, out, cluster, bar, unreachable_limit_s)
    try:
        with _quiet_submitit():
            while sweep.pending:
                bar.set_postfix_str(sweep.poll(), refresh=True)
                if sweep.pending:
                    time.sleep(poll_s)
    except KeyboardInterrupt as e:  # the frame's interrupt line names the jobs this leaves running
        bar.close()
        e.jobs_left = sweep.jobs_left()  # type: ignore[attr-defined]
        raise
    bar.close()
    if sweep.failed:
        done = len(submitted) - len(sweep.failed)
        raise SweepIncomplete(
            (f"{sweep.gave_up}: " if sweep.gave_up else "")
            + f"{len(sweep.failed)} of {len(submitted)} job(s) did not finish their runs: "
            + "; ".join(sweep.failed)
            + (f". The {done} finished run(s) are kept; the others" if done else ". No run finished; they")
            + " resume from their last checkpoints with: "
            + (resume or "the same command again"),
            sweep.unfinished,
        )


def _counts(pending: list, live: dict | None) -> str:
    """The progress line's tail: how many jobs run, how many pend and why (squeue's reason)."""
    if live is None:
        return f"{len(pending)} waiting"
    ids = [sub.job_id for _, sub in pending if sub is not None]
    states = [live[j] for j in ids if j in live]
    running = sum(1 for q in states if q.state not in ("PENDING", "SUSPENDED"))
    suspended = sum(1 for q in states if q.state == "SUSPENDED")
    why = Counter(q.reason for q in states if q.state == "PENDING")
    parts = [f"{running} running"] if running else []
    parts += [f"{suspended} suspended"] if suspended else []
    parts += [f"{n} pending" + (f" ({r})" if r not in ("", "None") else "") for r, n in sorted(why.items())]
    if len(ids) > len(states):
        parts.append(f"{len(ids) - len(states)} leaving the queue")
    if len(pending) > len(ids):
        parts.append(f"{len(pending) - len(ids)} trained by another process")
    return ", ".join(parts)


@contextlib.contextmanager
def _quiet_submitit():
    """submitit's logger warns on every poll where sacct fails ("Bypassing sacct error"): the progress line
    says what there is to say while the launcher waits."""
    import logging

    log = logging.getLogger("submitit")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
