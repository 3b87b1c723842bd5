"""What Slurm says of a sweep's jobs, asked the way a small cluster answers (experiments.cluster.launch's wait).

submitit asks only sacct, and with accounting off (no slurmdbd: sacct fails) a job that died never reads as
done: the sweep waited forever. Here squeue says which jobs are still queued or running; of one that left
the queue without a result, sacct is asked first (it keeps every job when accounting is on), then
scontrol (which keeps a finished job for MinJobAge seconds, 300 by default); when neither knows it, that is
said too. Job ids are submitit's: "123" for a lone job, "123_4" for task 4 of array 123.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 30  # a controller that does not answer within this is reported as not answering


class SlurmUnreachable(Exception):
    """squeue failed: nothing can be said of any job this poll (a controller restarting, a network blip)."""


@dataclass(frozen=True)
class Queued:
    state: str  # PENDING, RUNNING, COMPLETING, CONFIGURING, ...
    reason: str  # why it pends (Resources, Priority, BeginTime, ...), "None" when it runs


@dataclass(frozen=True)
class Ended:
    state: str  # CANCELLED, FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, COMPLETED, or "unknown"
    said: str  # what Slurm said, with which command: the line a user reads


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _parents(job_ids: list[str]) -> list[str]:
    return sorted({j.split("_")[0] for j in job_ids}, key=int)


def queued(job_ids: list[str]) -> dict[str, Queued]:
    """The jobs among job_ids that squeue still lists (one line per array task)."""
    if not job_ids:
        return {}
    found = _squeue(["--jobs=" + ",".join(_parents(job_ids))])
    return {j: found[j] for j in job_ids if j in found}


def named(name: str) -> dict[str, Queued]:
    """Every job squeue lists under the job name `name` (one line per array task)."""
    return _squeue([f"--name={name}"])


def _squeue(which: list[str]) -> dict[str, Queued]:
    cmd = ["squeue", "--array", "--noheader", "--format=%i|%T|%r", *which]
    try:
        done = _run(cmd)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmUnreachable(f"squeue: {e}") from None
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:  # every one of them has left the queue (and MinJobAge passed)
            return {}
        raise SlurmUnreachable(f"squeue: {done.stderr.strip() or f'exit status {done.returncode}'}")
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            found[parts[0]] = Queued(parts[1], parts[2])
    return found


def _sacct(job_ids: list[str]) -> dict[str, Ended]:
    cmd = ["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID,State,ExitCode"]
    cmd += ["--jobs=" + ",".join(job_ids)]
    try:
        done = _run(cmd)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if done.returncode != 0:  # "Slurm accounting storage is disabled": scontrol's turn
        return {}
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] in job_ids:
            state = parts[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
            found[parts[0]] = Ended(state, f"sacct: State={parts[1]} ExitCode={parts[2]}")
    return found


_FIELDS = ("JobState", "Reason", "ExitCode", "RunTime", "TimeLimit")
_UNKNOWN = Ended(
    "unknown",
    "neither sacct (accounting off?) nor scontrol (past MinJobAge?) knows this job any more; "
    "an array task cancelled before it started leaves no record",
)


def _scontrol(job_ids: list[str]) -> dict[str, Ended]:
    found = {}
    for parent in _parents(job_ids):
        try:
            done = _run(["scontrol", "--oneliner", "show", "job", parent])
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode != 0:  # "Invalid job id specified": gone for longer than MinJobAge
            continue
        for line in done.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            task = fields.get("ArrayTaskId")
            key = f"{fields.get('ArrayJobId')}_{task}" if task is not None else fields.get("JobId")
            if key in job_ids and "JobState" in fields:
                said = " ".join(f"{k}={fields[k]}" for k in _FIELDS if k in fields)
                found[key] = Ended(fields["JobState"], f"scontrol: {said}")
    return found


def ended(job_ids: list[str]) -> dict[str, Ended]:
    """What Slurm says of each job that left the queue: sacct where accounting is on, else scontrol."""
    found = _sacct(job_ids)
    rest = [j for j in job_ids if j not in found]
    if rest:
        found.update(_scontrol(rest))
    for j in job_ids:
        found.setdefault(j, _UNKNOWN)
    return found


def stepd_said(log: Path) -> str:
    """slurmstepd's last word in a job's log ("Exceeded job memory limit", "CANCELLED AT ... DUE TO TIME
    LIMIT"): where the job state alone (FAILED) does not say why."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 20_000))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.startswith("slurmstepd")]
    return lines[-1] if lines else ""
