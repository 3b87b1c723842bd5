"""Which Slurm job trains which run of a sweep: <result dir>/.submitit/jobs.json (experiments.cluster.launch).

A run's lock says only that a trainer holds it, and a job still PENDING holds nothing: a rerun (or a second
submitter started at the same time) resubmitted queued runs, and two jobs then trained into one run folder.
Every submission writes here which job each run got and the command it came from, under a lock that the
whole check-and-submit holds; the next one asks squeue which of those jobs are still queued and waits for
them instead of submitting again. --collect reads it to tell a run whose job still runs from one whose job
left the queue without a result.

A submission under way is written here before sbatch runs ("submitting": its job name, unique to it, and the
runs in the order of its array's tasks): an interrupt inside sbatch can leave jobs queued whose ids were never
read, and the next submission finds them by that name (experiments.cluster.slurm_jobs.found_after_interrupt)
instead of submitting their runs again.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from interp.errors import ToolkitError
from interp.files.io import atomic_write

SUBMIT_LOCK_WAIT_S = 600  # another submission into this folder holds the lock for its sbatch: seconds
JOB_ID = re.compile(r"\d+(_\d+)?")  # a job, or an array task: what squeue and scancel take


def _entry_ok(entry) -> bool:
    """One run's entry as add() writes it: a Slurm job id and the submitting command, both strings."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("job"), str)
        and JOB_ID.fullmatch(entry["job"]) is not None
        and isinstance(entry.get("command"), str)
    )


def _pending_ok(entry) -> bool:
    """A submission under way as begin() writes it."""
    runs = entry.get("runs") if isinstance(entry, dict) else None
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in ("name", "command", "module"))
        and isinstance(entry.get("argv"), list)
        and all(isinstance(w, str) for w in entry["argv"])
        and all(isinstance(entry.get(k), int) for k in ("gpus", "timeout_min", "max_num_timeout"))
        and isinstance(runs, list)
        and len(runs) > 0
        and all(isinstance(r, dict) and _run_ok(r) for r in runs)
    )


def _run_ok(run: dict) -> bool:
    return all(isinstance(run.get(k), str) for k in ("key", "preset", "variant")) and isinstance(run.get("seed"), int)


class JobRecord:
    def __init__(self, folder: Path):
        self.path = folder / "jobs.json"
        self.lock = folder / "jobs.lock"

    def load(self) -> dict[str, dict[str, str]]:
        """{run key: {"job": Slurm job id, "command": the submitting command}}; {} where nothing was recorded."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ToolkitError(f"cannot read {self.path}: {e}; remove it if no job of this sweep is queued") from None
        runs = data.get("runs") if isinstance(data, dict) else None
        if not isinstance(runs, dict) or not all(_entry_ok(e) for e in runs.values()):
            raise ToolkitError(f"{self.path} is not a job record; remove it if no job of this sweep is queued")
        return runs

    def add(self, entries: dict[str, dict[str, str]]) -> None:
        """Record which job each run got; the submission under way (begin) is over."""
        self._write({**self.load(), **entries})

    def pending(self) -> dict | None:
        """The submission under way that never recorded its jobs (an interrupt inside sbatch), or None."""
        if not self.path.is_file():
            return None
        self.load()  # a record that is not one: its refusal
        entry = json.loads(self.path.read_text()).get("submitting")
        if entry is not None and not _pending_ok(entry):
            raise ToolkitError(f"{self.path} is not a job record; remove it if no job of this sweep is queued")
        return entry

    def begin(self, entry: dict) -> None:
        """A submission is under way: its job name and runs (in the order of its array's tasks), written
        before sbatch runs, until add() records its jobs or end() says it queued none."""
        self._write(self.load(), entry)

    def end(self) -> None:
        """The submission under way queued no job (sbatch refused it; an earlier one's jobs were looked for)."""
        self._write(self.load())

    def _write(self, runs: dict[str, dict[str, str]], submitting: dict | None = None) -> None:
        if not runs and submitting is None:  # nothing to keep: no record, as before any submission
            self.path.unlink(missing_ok=True)
            return
        data = {"runs": runs, **({"submitting": submitting} if submitting is not None else {})}
        text = json.dumps(data, indent=1, sort_keys=True)
        atomic_write(self.path, lambda tmp: Path(tmp).write_text(text + "\n"))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Held from reading the record to writing the new jobs into it: a second submitter waits here, then
        sees the first one's jobs in the queue."""
        from filelock import FileLock, Timeout

        self.lock.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.lock, timeout=SUBMIT_LOCK_WAIT_S)
        try:
            lock.acquire()
        except Timeout:
            raise ToolkitError(
                f"another submission into {self.lock.parent} has held {self.lock.name} for "
                f"{SUBMIT_LOCK_WAIT_S}s; is a submitting command stuck?"
            ) from None
        try:
            yield
        finally:
            lock.release()


def run_key(run_path: Path, out: Path) -> str:
    """A run's key in the record: its folder under --out ("smoke/attn_only/seed1")."""
    return run_path.resolve().relative_to(out.resolve()).as_posix()
