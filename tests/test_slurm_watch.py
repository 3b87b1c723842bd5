"""The launcher's Slurm watch with stand-in squeue/sacct/scontrol on PATH (no cluster: tests/test_slurm.py has
the real one). What only these can show quickly: a cluster with accounting on (sacct answers), one where
neither sacct nor scontrol knows a job any more, and a controller that does not answer."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments.cluster import slurm_watch
from experiments.cluster.wait_jobs import SweepIncomplete, _counts, wait
from interp.command.signals import Terminated
from interp.errors import ToolkitError

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
    pairs = [(None, FakeSub(Path("."), j)) for j in ("5_0", "5_2", "5_3")]
    assert _counts(pairs, {**live, "5_3": slurm_watch.Queued("SUSPENDED", "None")}) == (
        "1 running, 1 suspended, 1 pending (Resources)"  # suspended is not running (audit 51 case 35)
    )
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
    path: Path | None = None
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

    def done(self) -> bool:
        return self.paths.result_pickle.exists()


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


# ----- audit 51: Slurm not answering, an interrupted wait, the job record, sbatch's refusal, --collect ------------


def test_results_are_read_while_squeue_fails_and_a_silent_slurm_ends_the_wait(slurm_bin, tmp_path):
    """Audit 51 case 36: with squeue gone the command waited forever though every job had written its result.
    The result files are read on every poll; a Slurm that stays silent ends the wait naming what is missing."""
    fake(slurm_bin, "squeue", stderr="slurm_load_jobs error: Unable to contact slurm controller", code=1)
    for s in range(2):
        (tmp_path / f"5_{s}_0_result.pkl").write_bytes(b"")
    jobs = [(FakeJob(FakeVariant("full"), s), FakeSub(tmp_path, f"5_{s}")) for s in range(2)]
    start = time.monotonic()
    wait(jobs, tmp_path, progress=False, poll_s=0.01, unreachable_limit_s=60)  # every result there: done
    assert time.monotonic() - start < 5
    (tmp_path / "5_1_0_result.pkl").unlink()
    with pytest.raises(SweepIncomplete) as e:
        wait(jobs, tmp_path, progress=False, poll_s=0.01, unreachable_limit_s=0.3, resume="python -m x")
    assert [j.seed for j in e.value.unfinished] == [1] and e.value.exit_code == 3
    assert str(e.value).startswith("Slurm did not answer for ")
    assert "Unable to contact slurm controller" in str(e.value)
    assert "1 of 2 job(s) did not finish their runs: full seed 1 (job 5_1)" in str(e.value)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, Terminated], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_wait_names_the_jobs_it_leaves_running_and_how_to_stop_them(
    slurm_bin, tmp_path, monkeypatch, interrupt
):
    """Audit 51 cases 6-7: Ctrl-C or SIGTERM left the jobs running, unnamed. They go on (not cancelled); the
    interrupt carries which squeue still lists and the scancel line (the frame prints it)."""
    from experiments.cluster import wait_jobs

    fake(slurm_bin, "squeue", "5_1|RUNNING|None\n5_2|PENDING|Priority\n")
    (tmp_path / "5_0_0_result.pkl").write_bytes(b"")
    jobs = [(FakeJob(FakeVariant("full"), s), FakeSub(tmp_path, f"5_{s}")) for s in range(4)]

    real_sleep = time.sleep

    def ctrl_c(seconds):  # the wait's own sleep between polls (2 s); subprocess's short ones go on
        if seconds >= 1:
            raise interrupt()
        real_sleep(seconds)

    monkeypatch.setattr(wait_jobs.time, "sleep", ctrl_c)
    with pytest.raises(interrupt) as e:
        wait(jobs, tmp_path, progress=False)
    left = e.value.jobs_left  # type: ignore[attr-defined]
    assert left.startswith("2 Slurm job(s) are still queued or running, not cancelled: 5_1 5_2;")
    assert "`scancel 5_1 5_2`" in left and "nothing is resubmitted" in left  # 5_0 done, 5_3 left the queue
    with pytest.raises(KeyboardInterrupt) as e:  # submitit's local executor: nothing of Slurm's to say
        wait(jobs, tmp_path, progress=False, cluster="local")
    assert e.value.jobs_left == ""  # type: ignore[attr-defined]


@dataclass
class RecordedJob:
    variant: FakeVariant
    seed: int
    out: Path

    def run_dir(self, out):
        return FakeRun(out / "smoke" / self.variant.name / f"seed{self.seed}")


def recorded_sweep(tmp_path: Path, ids: dict[int, str]):
    """A sweep's context and jobs, and a job record saying which job each seed got."""
    from types import SimpleNamespace

    from experiments.cluster.job_record import JobRecord

    out = tmp_path / "out"
    ctx = SimpleNamespace(out=out, result_dir=out / "smoke")
    jobs = [RecordedJob(FakeVariant("full"), s, out) for s in ids]
    JobRecord(out / "smoke" / ".submitit").add(
        {
            f"smoke/full/seed{s}": {"job": j, "command": "python -m experiments.x --launcher slurm"}
            for s, j in ids.items()
        }
    )
    return ctx, jobs


def test_a_rerun_waits_for_the_queued_jobs_of_an_earlier_submission(slurm_bin, tmp_path):
    """Audit 51 cases 11 and 40: a run whose earlier job still pended was submitted again (two jobs, one run
    folder). The record says which job each run got; one that squeue still lists is waited for."""
    from experiments.cluster.job_record import JobRecord
    from experiments.cluster.launch import queued_earlier

    ctx, jobs = recorded_sweep(tmp_path, {1: "19_0", 2: "19_1"})
    fake(slurm_bin, "squeue", "19_0|PENDING|PartitionDown\n")
    folder = ctx.result_dir / ".submitit"
    waited = queued_earlier(JobRecord(folder), [*jobs, RecordedJob(FakeVariant("full"), 3, ctx.out)], ctx.out, folder)
    assert [(j.seed, sub.job_id) for j, sub in waited] == [(1, "19_0")]  # 19_1 left the queue: resubmitted
    assert waited[0][1].paths.result_pickle == folder.resolve() / "19_0_0_result.pkl"
    fake(slurm_bin, "squeue", stderr="Unable to contact slurm controller", code=1)
    with pytest.raises(ToolkitError, match=r"cannot tell whether this sweep's earlier jobs \(19_0, 19_1\)"):
        queued_earlier(JobRecord(folder), jobs, ctx.out, folder)


def test_collect_tells_a_job_still_queued_from_one_gone_without_a_result(slurm_bin, tmp_path, capsys):
    """Audit 51 case 38: --collect after --no-wait said 'wait for their jobs' of a job that had been cancelled.
    It says what each job does (squeue, else scontrol); with every one gone it is the sweep's incomplete end
    (exit 3, the finished runs aggregated) with the command that resumes them."""
    from experiments.cluster.launch import unfinished_refusal

    ctx, jobs = recorded_sweep(tmp_path, {1: "5_0", 2: "5_1"})
    fake(slurm_bin, "squeue", "5_0|PENDING|PartitionDown\n")
    fake(slurm_bin, "sacct", stderr="Slurm accounting storage is disabled", code=1)
    fake(slurm_bin, "scontrol", SCONTROL_5)
    refusal = unfinished_refusal(ctx, jobs)
    assert type(refusal) is ToolkitError
    assert str(refusal) == (
        "2 run(s) not finished yet: full seed 1 (job 5_0): pending (PartitionDown); full seed 2 (job 5_1): left the "
        "queue without a result: CANCELLED (scontrol: JobState=CANCELLED Reason=None ExitCode=0:15 "
        "RunTime=00:00:12 TimeLimit=00:10:00); wait for the queued or running ones; resume the gone ones with: "
        "python -m experiments.x --launcher slurm (it waits for the queued ones)"
    )
    fake(slurm_bin, "squeue", stderr="slurm_load_jobs error: Invalid job id specified", code=1)
    capsys.readouterr()
    gone = unfinished_refusal(ctx, jobs)
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "not finished: full seed 1 (job 5_0): left the queue without a result: unknown (neither " + (
        "sacct (accounting off?) nor scontrol (past MinJobAge?) knows this job any more; an array task cancelled "
        "before it started leaves no record)"
    )
    assert said[1].startswith("not finished: full seed 2 (job 5_1): left the queue without a result: CANCELLED")
    assert isinstance(gone, SweepIncomplete) and gone.unfinished == jobs and gone.exit_code == 3
    assert "full seed 2 (job 5_1): left the queue without a result: CANCELLED" in str(gone)
    assert str(gone).endswith("resume from their last checkpoints with: python -m experiments.x --launcher slurm")
    # a run no job of this sweep trains (the local launcher's, or never submitted): the old refusal
    unknown = unfinished_refusal(ctx, [RecordedJob(FakeVariant("none"), 1, ctx.out)])
    assert str(unknown) == "1 run(s) not finished yet: none seed 1; wait for their jobs or run without --collect"


def test_sbatch_refusing_the_submission_is_one_line_naming_the_option(slurm_bin, tmp_path, shared_data, capsys):
    """Audit 51 cases 19-21: a bad partition, --slurm-set value or --gpus-per-run on a node without GPUs was
    submitit's traceback and exit 1. It is one `error:` line with Slurm's words and the option, exit 2."""
    from experiments.routing_test import run as routing_test

    fake(slurm_bin, "srun")  # submitit's test for a Slurm cluster: without one it refuses before sbatch runs
    fake(
        slurm_bin,
        "sbatch",
        stderr="sbatch: error: invalid partition specified: nosuch\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified",
        code=1,
    )
    argv = ["--preset", "smoke", "--variants", "attn_only", "--no-report", "--no-progress", "--out", str(tmp_path)]
    code = routing_test.EXPERIMENT.main([*argv, "--launcher", "slurm", "--slurm-partition", "nosuch"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err == (
        "error: Slurm refused the submission (check --slurm-partition nosuch): sbatch: error: invalid partition "
        "specified: nosuch; sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )
    assert not (tmp_path / "smoke" / ".submitit" / "jobs.json").exists()  # nothing recorded as submitted


def test_the_refusal_names_the_option_slurm_complained_of():
    import argparse

    from experiments.cluster.launch import refused_line

    args = argparse.Namespace(slurm_partition=None, gpus_per_run=1, slurm_time=60, slurm_set=["slurm_mem=lots"])
    gres = RuntimeError("sbatch: error: Invalid generic resource (gres) specification")
    assert refused_line(args, gres) == (
        "Slurm refused the submission (check --gpus-per-run 1): sbatch: error: Invalid generic resource (gres) "
        "specification"
    )
    mem = RuntimeError("sbatch: error: Invalid --mem specification")
    assert refused_line(args, mem).startswith("Slurm refused the submission (check --slurm-set slurm_mem=lots): ")
    other = RuntimeError("sbatch: error: something else")
    assert "(check --slurm-set slurm_mem=lots)" in refused_line(args, other)  # nothing matched: what was given


@pytest.mark.parametrize(
    "entry",
    [
        "19_0",
        {"job": "abc", "command": "x"},
        {"job": 19, "command": "x"},
        {"job": "19_0"},
        {"job": "19; rm", "command": "x"},
    ],
)
def test_a_hand_edited_job_record_is_one_refusal_not_a_traceback(tmp_path, entry):
    """Audit 51b cases 35-41: an entry that is not what a submission writes (a job id squeue takes, the command)
    ended in TypeError, ValueError, AttributeError or KeyError; it is the record's one-line refusal."""
    from experiments.cluster.job_record import JobRecord

    folder = tmp_path / ".submitit"
    folder.mkdir()
    (folder / "jobs.json").write_text(json.dumps({"runs": {"smoke/full/seed1": entry}}))
    with pytest.raises(ToolkitError, match=r"is not a job record; remove it if no job of this sweep is queued"):
        JobRecord(folder).load()


# ----- issue 58: an interrupt inside sbatch ---------------------------------------------------------------------


def interrupted_sbatch(bin_dir: Path, state: Path, signal: str) -> None:
    """An sbatch that queues the array (the tasks go to state/queue, which the stand-in squeue lists) and then
    interrupts the command (SIGTERM: a scheduler's kill; SIGINT: Ctrl-C) before it prints the id."""
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\n"
        f"last=$(sed -n 's/^#SBATCH --array=0-\\([0-9]*\\).*/\\1/p' \"$1\")\n"
        f'for i in $(seq 0 ${{last:-0}}); do echo "77_$i|PENDING|Priority"; done > {state}/queue\n'
        f"sed -n 's/^#SBATCH --job-name=//p' \"$1\" > {state}/name\n"
        f"kill -{signal} $PPID\nsleep 1\necho 'Submitted batch job 77'\n"
    )
    (bin_dir / "sbatch").chmod(0o755)
    (bin_dir / "squeue").write_text(f"#!/bin/sh\ncat {state}/queue 2>/dev/null\nexit 0\n")
    (bin_dir / "squeue").chmod(0o755)


@pytest.mark.parametrize("signal,code", [("TERM", 143), ("INT", 130)], ids=["sigterm", "ctrl-c"])
def test_jobs_an_interrupted_sbatch_queued_are_found_and_recorded_not_submitted_again(
    slurm_bin, tmp_path, shared_data, capsys, signal, code
):
    """An interrupt (SIGTERM, Ctrl-C) inside sbatch left the jobs it queued out of the job record, and the next
    run submitted their runs again (two jobs per run folder). The submission is recorded before sbatch runs, under
    a job name of its own; the rerun finds its jobs by that name (squeue), gives each the job file submitit writes
    after sbatch, records them and waits for them."""
    import pickle

    from experiments.routing_test import run as routing_test

    pytest.importorskip("submitit")
    state = tmp_path / "state"
    state.mkdir()
    interrupted_sbatch(slurm_bin, state, signal)
    fake(slurm_bin, "srun")  # submitit's test for a Slurm cluster
    out = tmp_path / "out"
    argv = ["--preset", "smoke", "--variants", "attn_only", "--seeds", "1,2", "--no-report", "--no-progress"]
    argv += ["--out", str(out), "--launcher", "slurm", "--no-wait"]
    assert routing_test.EXPERIMENT.main(argv) == code
    name = (state / "name").read_text().strip()
    assert name.startswith("routing_test-") and name != "routing_test-"
    err = capsys.readouterr().err
    assert f"sbatch was interrupted: jobs it may have queued are named {name} (squeue --name={name})" in err
    folder = out / "smoke" / ".submitit"
    assert json.loads((folder / "jobs.json").read_text())["runs"] == {}  # the ids were never read
    assert json.loads((folder / "jobs.json").read_text())["submitting"]["name"] == name  # the submission was

    fake(slurm_bin, "sbatch", stderr="sbatch: error: submitted twice", code=1)  # the rerun must not submit
    assert routing_test.EXPERIMENT.main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "2 job(s) of a submission interrupted inside sbatch were still queued (77_0, 77_1)" in printed
    assert "2 run(s) already have a queued or running job (77_0, 77_1); not resubmitting" in printed
    record = json.loads((folder / "jobs.json").read_text())
    assert "submitting" not in record
    assert {k: v["job"] for k, v in record["runs"].items()} == {
        "smoke/attn_only/seed1": "77_0",
        "smoke/attn_only/seed2": "77_1",
    }
    for task, seed in (("77_0", 1), ("77_1", 2)):  # what each job runs when it starts: its run, as submitted
        with (folder / f"{task}_submitted.pkl").open("rb") as f:
            args = pickle.load(f).args
        assert args[0] == "routing_test" and args[2:5] == ("smoke", "attn_only", seed)


def test_an_interrupted_submission_is_refused_in_one_line_where_its_jobs_cannot_be_told(slurm_bin, tmp_path):
    """Slurm not answering, or a job under the submission's name that is none of its tasks: one refusal naming
    them, never a second submission."""
    from experiments.cluster.job_record import JobRecord
    from experiments.cluster.launch import job_main
    from experiments.cluster.slurm_jobs import found_after_interrupt

    folder = tmp_path / ".submitit"
    folder.mkdir()
    record = JobRecord(folder)
    run = {"key": "smoke/full/seed1", "preset": "smoke", "variant": "full", "seed": 1}
    entry = {"name": "x-1a2b3c", "command": "c", "module": "routing_test", "argv": [], "gpus": 0}
    record.begin({**entry, "timeout_min": 60, "max_num_timeout": 3, "runs": [run, {**run, "seed": 2}]})
    fake(slurm_bin, "squeue", stderr="slurm_load_jobs error: Unable to contact slurm controller", code=1)
    with pytest.raises(
        ToolkitError, match=r"interrupted inside sbatch, and whether it queued jobs \(named x-1a2b3c\) "
    ):
        found_after_interrupt(record, folder, job_main)
    fake(slurm_bin, "squeue", "9_0|PENDING|Priority\n9_5|PENDING|Priority\n")
    with pytest.raises(ToolkitError, match=r"job\(s\) 9_5 named x-1a2b3c, .* \(`scancel 9_5`\)"):
        found_after_interrupt(record, folder, job_main)
    assert record.pending() is not None  # still there: the next run looks again
    fake(slurm_bin, "squeue", "")  # sbatch never reached the controller: nothing to wait for
    assert found_after_interrupt(record, folder, job_main) == [] and record.pending() is None and record.load() == {}
