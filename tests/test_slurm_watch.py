"""The launcher's Slurm watch with stand-in squeue/sacct/scontrol on PATH (no cluster: tests/test_slurm.py has
the real one). What only these can show quickly: a cluster with accounting on (sacct answers), one where
neither sacct nor scontrol knows a job any more, and a controller that does not answer."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments.shared import slurm_watch
from experiments.shared.wait_jobs import SweepIncomplete, wait

SQUEUE_ARRAY = "5_0|RUNNING|None\n5_2|PENDING|Resources\n"
SCONTROL_5 = (
    "JobId=11 ArrayJobId=5 ArrayTaskId=1 JobName=x JobState=CANCELLED Reason=None ExitCode=0:15 "
    "RunTime=00:00:12 TimeLimit=00:10:00\n"
)


def fake(bin_dir: Path, name: str, stdout: str = "", stderr: str = "", code: int = 0) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\nprintf '%s' '{stdout}'\nprintf '%s' '{stderr}' >&2\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def slurm_bin(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_squeue_says_what_is_queued_and_a_task_gone_is_absent(slurm_bin):
    fake(slurm_bin, "squeue", SQUEUE_ARRAY)
    live = slurm_watch.queued(["5_0", "5_1", "5_2"])
    assert live == {"5_0": slurm_watch.Queued("RUNNING", "None"), "5_2": slurm_watch.Queued("PENDING", "Resources")}
    fake(slurm_bin, "squeue", stderr="slurm_load_jobs error: Invalid job id specified", code=1)
    assert slurm_watch.queued(["5_1"]) == {}  # every one gone (and past MinJobAge): not an error
    fake(slurm_bin, "squeue", stderr="slurm_load_jobs error: Unable to contact slurm controller", code=1)
    with pytest.raises(slurm_watch.SlurmUnreachable, match="Unable to contact"):
        slurm_watch.queued(["5_1"])


def test_sacct_is_asked_first_where_accounting_is_on(slurm_bin):
    fake(slurm_bin, "sacct", "5_1|OUT_OF_MEMORY|0:125\n5_3|CANCELLED by 0|0:15\n")
    fake(slurm_bin, "scontrol", SCONTROL_5)
    said = slurm_watch.ended(["5_1", "5_3"])
    assert said["5_1"] == slurm_watch.Ended("OUT_OF_MEMORY", "sacct: State=OUT_OF_MEMORY ExitCode=0:125")
    assert said["5_3"].state == "CANCELLED"


def test_with_accounting_off_scontrol_answers_and_else_it_is_said_nobody_knows(slurm_bin):
    fake(slurm_bin, "sacct", stderr="Slurm accounting storage is disabled", code=1)
    fake(slurm_bin, "scontrol", SCONTROL_5)
    said = slurm_watch.ended(["5_1", "7"])
    assert said["5_1"].state == "CANCELLED"
    assert said["5_1"].said == (
        "scontrol: JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=00:00:12 TimeLimit=00:10:00"
    )
    assert said["7"].state == "unknown" and "MinJobAge" in said["7"].said


@dataclass
class FakeVariant:
    name: str


@dataclass
class FakeRun:
    finished: bool = False

    def busy(self) -> bool:
        return False


@dataclass
class FakeJob:
    variant: FakeVariant
    seed: int

    def run_dir(self, out):
        return FakeRun()


class FakePaths:
    def __init__(self, folder: Path, job_id: str):
        self.result_pickle = folder / f"{job_id}_0_result.pkl"
        self.stderr = folder / f"{job_id}_0_log.err"


class FakeSub:
    def __init__(self, folder: Path, job_id: str):
        self.job_id, self.paths = job_id, FakePaths(folder, job_id)

    def exception(self):
        return None


def test_a_job_gone_without_a_result_is_said_on_the_second_poll_and_the_rest_waited_for(slurm_bin, tmp_path, capsys):
    """5_0 finished (its result file is there), 5_1 left the queue without one, 5_2 still pends then finishes:
    5_1 is named with what sacct said and the command to resume; the others are not."""
    polls = tmp_path / "polls"
    # squeue: 5_2 is queued on the first three polls, then gone (with its result written by then)
    (slurm_bin / "squeue").write_text(
        f"#!/bin/sh\necho x >> {polls}\nn=$(wc -l < {polls})\n"
        f'if [ "$n" -le 3 ]; then echo "5_2|PENDING|Priority"; else touch {tmp_path}/5_2_0_result.pkl; fi\n'
    )
    (slurm_bin / "squeue").chmod(0o755)
    fake(slurm_bin, "sacct", "5_1|NODE_FAIL|0:0\n")
    (tmp_path / "5_0_0_result.pkl").write_bytes(b"")
    jobs = [(FakeJob(FakeVariant("full"), s), FakeSub(tmp_path, f"5_{s}")) for s in range(3)]
    with pytest.raises(SweepIncomplete) as e:
        wait(jobs, tmp_path, progress=False, poll_s=0.01, resume="python -m experiments.x --seeds 0,1,2")
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "not finished: full seed 1 (job 5_1) left the queue without a result: NODE_FAIL "
        f"(sacct: State=NODE_FAIL ExitCode=0:0); log {tmp_path}/5_1_0_log.err"
    ]
    assert [j.seed for j in e.value.unfinished] == [1]
    assert e.value.exit_code == 3
    assert str(e.value).startswith("1 of 3 job(s) did not finish their runs: full seed 1 (job 5_1)")
    assert str(e.value).endswith("resume from their last checkpoints with: python -m experiments.x --seeds 0,1,2")
    assert len(polls.read_text().splitlines()) == 4  # said on the second poll after leaving; 5_2 waited for
