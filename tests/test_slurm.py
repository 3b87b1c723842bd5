"""--launcher slurm against a real one-node Slurm (scripts/slurm-cluster.sh; `make test-slurm`, as root).

Accounting is off there, as on a small cluster without slurmdbd (sacct fails): a job that left the queue
is read from squeue and scontrol. Each way a job dies is made for real: scancel, a SIGKILL of its trainer,
a memory limit the job exceeds, its node set DOWN, and a one-minute time limit. A job that dies is said
within a poll or two, the finished runs are aggregated, the exit status is 3, and the same command again
resumes the rest from their checkpoints.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from experiments.routing_test import run as routing_test

pytestmark = pytest.mark.slurm
pytest.importorskip("submitit")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"
DAEMONS = ("munged", "slurmctld", "slurmd")
main = routing_test.EXPERIMENT.main
BASE = ["--preset", "smoke", "--variants", "attn_only", "--no-report", "--no-progress"]
SLURM = ["--launcher", "slurm", "--slurm-partition", "debug"]


@pytest.fixture(scope="session")
def cluster():
    """A one-node Slurm for this session: started here, and afterwards not one of its daemons left."""
    required = os.environ.get("RESIDUAL_SLURM_REQUIRED") == "1"
    state = Path(tempfile.mkdtemp(prefix="residual-slurm-"))
    env = {**os.environ, "SLURM_TEST_DIR": str(state)}
    started = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True)
        why = f"no one-node Slurm here: {started.stderr.strip()[-500:]}"
        if required:
            pytest.fail(why)
        pytest.skip(why)
    pids = {name: int((state / f"{name}.pid").read_text()) for name in DAEMONS}
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(state / "slurm.conf")
    try:
        yield {"dir": state, "node": subprocess.check_output(["hostname", "-s"], text=True).strip(), "pids": pids}
    finally:
        stopped = subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, text=True)
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        alive = [f"{name}({pid})" for name, pid in pids.items() if _alive(pid)]
        assert stopped.returncode == 0 and not alive, f"daemons left: {alive} {stopped.stderr}"
        shutil.rmtree(state, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def numbers(out: Path) -> list:
    results = json.loads((out / "smoke" / "results-routing_test.json").read_text())
    return [(r["variant"], r["seed"], r["final_val_loss"], r["val_curve"], r["train_curve"]) for r in results["runs"]]


def run_dir(out: Path, seed: int) -> Path:
    return out / "smoke" / "attn_only" / f"seed{seed}"


def final(out: Path, seed: int) -> dict:
    return json.loads((run_dir(out, seed) / "final.json").read_text())


class Stamped:
    """sys.stdout that keeps when each line was printed (when the launcher said a job had died)."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []
        self._part = ""

    def write(self, text: str) -> int:
        self._part += text
        *whole, self._part = self._part.split("\n")
        self.lines += [(time.monotonic(), line) for line in whole]
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def when(self, pattern: str) -> float:
        hits = [t for t, line in self.lines if re.search(pattern, line)]
        assert hits, f"never printed: {pattern}"
        return hits[0]


def job_of(out: Path, seed: int, timeout: float = 120, exclude: int = 0) -> str:
    """The Slurm job id of a seed's run: read from submitit's submission pickle (it holds job_main's args);
    the first `exclude` of them (earlier submissions' jobs) left out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = []
        for path in (out / "smoke" / ".submitit").glob("*_submitted.pkl"):
            try:
                with path.open("rb") as f:
                    args = pickle.load(f).args
            except (OSError, EOFError, pickle.UnpicklingError):
                continue
            if args[4] == seed:
                found.append(path.name.removesuffix("_submitted.pkl"))
        found.sort(key=lambda j: [int(x) for x in j.split("_")])
        if len(found) > exclude:
            return found[exclude]
        time.sleep(0.2)
    raise AssertionError(f"seed {seed} was never submitted")


def checkpointed(out: Path, seed: int, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not (run_dir(out, seed) / "ckpt.pt").exists():
        assert time.time() < deadline, f"seed {seed}'s job never checkpointed"
        time.sleep(0.1)


def left_queue(job_id: str, timeout: float = 60) -> float:
    """When squeue stopped listing job_id (time.monotonic())."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        listed = subprocess.run(["squeue", "--array", "-h", "-o", "%i"], capture_output=True, text=True).stdout
        if job_id not in listed.split():
            return time.monotonic()
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never left the queue")


def trainer_pid(job_id: str) -> int:
    """The process that runs job_id's python (submitit's _submit), found by its Slurm environment."""
    main_id, _, task = job_id.partition("_")
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = dict(v.split("=", 1) for v in environ.read_bytes().decode(errors="replace").split("\0") if "=" in v)
            cmd = (environ.parent / "cmdline").read_bytes()
        except OSError:
            continue
        ids = (env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")) if task else (env.get("SLURM_JOB_ID"),)
        if ids == ((main_id, task) if task else (main_id,)) and b"submitit.core._submit" in cmd:
            return int(environ.parent.name)
    raise AssertionError(f"no trainer process of job {job_id}")


def in_background(fn) -> threading.Thread:
    """What the test does to the jobs runs beside the sweep: main() holds the main thread (its signal handlers)."""
    errors: list[BaseException] = []

    def target():
        try:
            fn()
        except BaseException as e:  # re-raised by join_ok
            errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def join_ok(thread: threading.Thread) -> None:
    thread.join(timeout=300)
    assert not thread.is_alive()
    if thread.errors:  # type: ignore[attr-defined]
        raise thread.errors[0]  # type: ignore[attr-defined]


def results_of(out: Path) -> dict:
    return json.loads((out / "smoke" / "results-routing_test.json").read_text())


# ----- a sweep that works --------------------------------------------------------------------------------


def test_a_sweep_through_slurm_equals_the_local_one_with_one_progress_line(cluster, tmp_path, shared_data, capsys):
    args = [*BASE, "--seeds", "1,2", "--set", "max_steps=200"]
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    capsys.readouterr()
    out = tmp_path / "slurm"
    with_progress = [a for a in args if a != "--no-progress"]
    assert main([*with_progress, *SLURM, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "submitted 2 job(s) (slurm)" in printed.out
    assert numbers(out) == numbers(tmp_path / "local")  # bit for bit
    # the console: one progress line redrawn in place (tqdm's \r) saying what runs, no library warning per poll
    assert "Bypassing" not in printed.err and "sacct" not in printed.err
    jobs_line = [line for line in printed.err.split("\n") if "jobs:" in line]
    assert len(jobs_line) == 1 and "2/2" in jobs_line[0] and re.search(r"\d running|pending", jobs_line[0])
    # nothing left to do: the same command trains nothing and aggregates the same numbers
    assert main([*args, *SLURM, "--out", str(out)]) == 0
    assert "submitted" not in capsys.readouterr().out
    assert numbers(out) == numbers(tmp_path / "local")


# ----- jobs that die ---------------------------------------------------------------------------------------


def test_cancelled_and_killed_jobs_are_said_at_once_and_the_rest_aggregated(cluster, tmp_path, shared_data, capsys):
    """Seed 1 finishes; seed 2's job is scancelled and seed 3's trainer SIGKILLed (as the kernel's OOM killer
    does) at their first checkpoints. Each is said within two polls, seed 1 is aggregated, the status is 3;
    the same command again resumes both from their checkpoints."""
    args = [*BASE, "--seeds", "1,2,3", "--set", "max_steps=600", *SLURM, "--out", str(tmp_path)]
    left_at = {}

    def kill():
        cancel, kill = job_of(tmp_path, 2), job_of(tmp_path, 3)
        checkpointed(tmp_path, 2)
        subprocess.run(["scancel", cancel], check=True)
        left_at[2] = left_queue(cancel)
        checkpointed(tmp_path, 3)
        os.kill(trainer_pid(kill), signal.SIGKILL)
        left_at[3] = left_queue(kill)

    stamped = Stamped()
    thread = in_background(kill)
    real = sys.stdout
    sys.stdout = stamped
    try:
        code = main(args)
    finally:
        sys.stdout = real
    join_ok(thread)
    err = capsys.readouterr().err
    assert code == 3, err
    text = stamped.text()
    # said at once, with what Slurm said (accounting off: scontrol) and the job's log
    said_2 = stamped.when(r"^not finished: attn_only seed 2 \(job \S+\) left the queue without a result: CANCELLED")
    assert said_2 - left_at[2] < 2 * 2.0 + 2, text  # two polls of 2 s after it left the queue, and squeue's time
    said_3 = stamped.when(r"^not finished: attn_only seed 3 ")
    assert said_3 - left_at[3] < 2 * 2.0 + 2, text
    assert re.search(r"seed 3 .*(FAILED|raised an error)", text), text
    assert "scontrol: JobState=CANCELLED" in text and "_log.err" in text
    # the finished run aggregated, the file saying what is missing; the error line names the command to resume
    results = results_of(tmp_path)
    assert [r["seed"] for r in results["runs"]] == [1]
    assert results["incomplete"] == {"unfinished": ["attn_only seed 2", "attn_only seed 3"]}
    assert "2 of 3 job(s) did not finish" in err
    assert shlex.join([sys.executable, "-m", "experiments.routing_test", *args]) in err  # resumes them
    # the same command resumes both from their checkpoints
    capsys.readouterr()
    assert main(args) == 0
    assert "submitted 2 job(s)" in capsys.readouterr().out
    for seed in (2, 3):
        assert 0 < final(tmp_path, seed)["resumed_from_step"] < 600
    assert "incomplete" not in results_of(tmp_path)
    assert [r["seed"] for r in results_of(tmp_path)["runs"]] == [1, 2, 3]


def test_a_job_over_its_memory_limit_is_said_with_slurms_words(cluster, tmp_path, shared_data, capsys):
    """A job past its --mem. Stand-in: with no cgroups of its own here Slurm kills it from its accounting poll
    (OverMemoryKill) and the job ends FAILED, its log saying "Exceeded job memory limit"; on a cgroup cluster
    the same job ends OUT_OF_MEMORY, which is said the same way. No run finished: nothing aggregated, 3."""
    args = [*BASE, "--seeds", "1", "--set", "max_steps=200", *SLURM, "--slurm-set", "slurm_mem=120M"]
    start = time.monotonic()
    assert main([*args, "--out", str(tmp_path)]) == 3
    printed = capsys.readouterr()
    said = r"seed 1 \(job \S+\) left the queue without a result: (FAILED|OUT_OF_MEMORY) \(scontrol: JobState="
    assert re.search(said + r".*Exceeded job memory limit", printed.out), printed.out
    assert "error: 1 of 1 job(s) did not finish" in printed.err
    assert not (tmp_path / "smoke" / "results-routing_test.json").exists()
    assert time.monotonic() - start < 90


def test_a_lost_node_is_said_node_fail(cluster, tmp_path, shared_data, capsys):
    """The node goes DOWN under a running job (as slurmctld marks a node whose slurmd stopped answering). A
    job that may not be requeued ends NODE_FAIL and is said; one that may (Slurm's default) is requeued,
    pends (BeginTime, about two minutes) and is waited for, which this test leaves out for time."""
    args = [*BASE, "--seeds", "1", "--set", "max_steps=2000", *SLURM, "--out", str(tmp_path)]
    args += ["--slurm-set", 'slurm_additional_parameters={"no-requeue": true}']
    node = cluster["node"]

    def lose_the_node():
        job_of(tmp_path, 1)
        checkpointed(tmp_path, 1)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=lost"], check=True)

    thread = in_background(lose_the_node)
    code = main(args)
    join_ok(thread)
    printed = capsys.readouterr()
    assert code == 3, printed.err
    assert re.search(r"seed 1 \(job \S+\) left the queue without a result: NODE_FAIL", printed.out), printed.out
    assert (run_dir(tmp_path, 1) / "ckpt.pt").exists()
    # ReturnToService=2: the node is back as soon as its slurmd registers again (resumed by hand if not)
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    deadline = time.time() + 60
    while subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True).stdout.strip() != "idle":
        assert time.time() < deadline, "the node never came back"
        time.sleep(0.5)


def steps_logged(out: Path, seed: int) -> list[dict]:
    path = run_dir(out, seed) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_job_past_its_time_limit_is_said_and_the_rerun_resumes_it(cluster, tmp_path, shared_data, capsys):
    """--slurm-time 1: the job ends TIMEOUT at its one-minute limit and is said with its run; the same command
    again resumes the run from its checkpoint (its log up to the checkpoint kept, not restarted from step 0)."""
    args = [*BASE, "--seeds", "1", "--set", "max_steps=100000", *SLURM, "--out", str(tmp_path), "--slurm-time", "1"]
    start = time.monotonic()
    assert main(args) == 3
    took = time.monotonic() - start
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert re.search(r"not finished: attn_only seed 1 \(job \S+\) left the queue without a result: TIMEOUT", text)
    assert "DUE TO TIME LIMIT" in text, text  # slurmstepd's words, from the job's log
    assert 60 < took < 150, took  # trained to its limit (submitit's early warning signal ignored)
    assert (run_dir(tmp_path, 1) / "ckpt.pt").exists() and not (run_dir(tmp_path, 1) / "final.json").exists()
    before = steps_logged(tmp_path, 1)
    last = before[-1]["step"]
    assert last > 10

    # the rerun resumes: once it has logged past where the first job stopped, cancel it and read its log
    def past_it():
        job = job_of(tmp_path, 1, exclude=1)
        deadline = time.time() + 120
        while not any(r["step"] > last + 10 for r in steps_logged(tmp_path, 1)):
            assert time.time() < deadline, "the rerun never got past the first job's last step"
            time.sleep(0.5)
        subprocess.run(["scancel", job], check=True)

    thread = in_background(past_it)
    assert main(args) == 3
    join_ok(thread)
    after = steps_logged(tmp_path, 1)
    kept = [r for r in after if r["step"] <= 10]
    assert kept == [r for r in before if r["step"] <= 10]  # the first job's records: resumed, not restarted
    assert after[-1]["step"] > last


# ----- audit 51: refusals, an interrupted wait, queued jobs of an earlier submission, --collect -----------------


def test_sbatch_refusing_the_submission_is_one_error_line(cluster, tmp_path, shared_data, capsys):
    """A partition Slurm does not have, a --slurm-set value sbatch rejects, GPUs on a node without any: one
    `error:` line with the option and Slurm's words, exit 2 (was submitit's traceback, exit 1)."""
    cases = [
        (["--slurm-partition", "nosuch"], "--slurm-partition nosuch", "invalid partition"),
        (["--slurm-set", "slurm_mem=lots"], "--slurm-set slurm_mem=lots", "Invalid --mem specification"),
        (["--gpus-per-run", "1"], "--gpus-per-run 1", "Invalid generic resource"),
    ]
    for extra, option, said in cases:
        argv = [*BASE, "--seeds", "1", "--launcher", "slurm", "--out", str(tmp_path), *extra]
        assert main(argv) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: Slurm refused the submission (check {option}): ") and said in err, err
    assert not (tmp_path / "smoke" / ".submitit" / "jobs.json").exists()


def squeue_ids(state: str = "all") -> list[str]:
    listed = subprocess.run(["squeue", "--array", "-h", "-t", state, "-o", "%i"], capture_output=True, text=True)
    return listed.stdout.split()


def submitted_seeds(out: Path) -> list[int]:
    """The seed of every job ever submitted into out (one per submission of a run)."""
    seeds = []
    for path in (out / "smoke" / ".submitit").glob("*_submitted.pkl"):
        with path.open("rb") as f:
            seeds.append(pickle.load(f).args[4])
    return sorted(seeds)


def test_an_interrupted_wait_names_the_running_jobs_and_the_rerun_waits_for_them(
    cluster, tmp_path, shared_data, capsys
):
    """Ctrl-C while the jobs run ends the waiting only: the jobs go on, and the line says which they are, how to
    stop them and the command that waits for them again, which resubmits nothing."""
    args = [*BASE, "--seeds", "1,2", "--set", "max_steps=600", *SLURM, "--out", str(tmp_path)]

    def ctrl_c_once_running():
        jobs = sorted([job_of(tmp_path, 1), job_of(tmp_path, 2)])
        deadline = time.time() + 120
        while sorted(squeue_ids("R")) != jobs:
            assert time.time() < deadline, "the jobs never ran"
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    thread = in_background(ctrl_c_once_running)
    assert main(args) == 130
    join_ok(thread)
    err = capsys.readouterr().err
    ids = [job_of(tmp_path, 1), job_of(tmp_path, 2)]
    assert f"2 Slurm job(s) are still queued or running, not cancelled: {' '.join(ids)}; " in err, err
    assert f"stop them with `scancel {' '.join(ids)}`" in err
    assert err.rstrip().endswith(shlex.join([sys.executable, "-m", "experiments.routing_test", *args]))
    assert set(ids) <= set(squeue_ids())  # not cancelled
    from interp.command.signals import restore

    restore()  # the interrupted command left its signals ignored, as a process that ends does
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert f"2 run(s) already have a queued or running job ({', '.join(ids)}); waiting for them" in printed
    assert "submitted" not in printed and submitted_seeds(tmp_path) == [1, 2]
    assert [r["seed"] for r in results_of(tmp_path)["runs"]] == [1, 2]


def partition(state: str) -> None:
    subprocess.run(["scontrol", "update", "PartitionName=debug", f"State={state}"], check=True)


def test_collect_and_a_rerun_while_earlier_jobs_pend(cluster, tmp_path, shared_data, capsys):
    """--no-wait with the partition down: --collect says each job pends and why; one cancelled is said gone
    without a result, with the command that resumes it. The rerun waits for the one still queued and submits
    only the cancelled run (was: both resubmitted, two jobs training into one run folder)."""
    args = [*BASE, "--seeds", "1,2", "--set", "max_steps=100", "--out", str(tmp_path)]
    partition("DOWN")
    try:
        assert main([*args, *SLURM, "--no-wait"]) == 0
        first, cancel = job_of(tmp_path, 1), job_of(tmp_path, 2)
        capsys.readouterr()
        assert main([*args, "--collect"]) == 2
        err = capsys.readouterr().err
        assert (
            f"attn_only seed 1 (job {first}): pending (PartitionDown); attn_only seed 2 (job {cancel}): pending" in err
        )
        subprocess.run(["scancel", cancel], check=True)
        left_queue(cancel)
        assert main([*args, "--collect"]) == 2
        err = capsys.readouterr().err
        assert f"attn_only seed 2 (job {cancel}): left the queue without a result: " in err, err
        resume = shlex.join([sys.executable, "-m", "experiments.routing_test", *args, *SLURM])
        assert f"wait for the queued or running ones; resume the gone ones with: {resume}" in err, err

        def up_once_resubmitted():
            job_of(tmp_path, 2, exclude=1)
            partition("UP")

        thread = in_background(up_once_resubmitted)
        assert main([*args, *SLURM]) == 0
        join_ok(thread)
    finally:
        partition("UP")
    printed = capsys.readouterr().out
    assert f"1 run(s) already have a queued or running job ({first}); waiting for them, not resubmitting" in printed
    assert "submitted 1 job(s)" in printed and submitted_seeds(tmp_path) == [1, 2, 2]
    assert [r["seed"] for r in results_of(tmp_path)["runs"]] == [1, 2]


def test_two_submitters_at_once_submit_each_run_once(cluster, tmp_path, shared_data):
    """Two commands started together into one --out: the second waits for the first's submission and finds its
    jobs queued (was: both submitted every run, and each reported the other's lock as its runs failing)."""
    command = [sys.executable, "-m", "experiments.routing_test", *BASE, "--seeds", "1,2", *SLURM]
    command += ["--out", str(tmp_path), "--no-wait"]
    env = {**os.environ, "RESIDUAL_DATA_DIR": str(shared_data)}
    partition("DOWN")
    try:
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=180)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert submitted_seeds(tmp_path) == [1, 2]
        assert sum("submitted 2 job(s)" in o for o in outs) == 1, outs
        assert sum("2 run(s) already have a queued or running job" in o for o in outs) == 1, outs
    finally:
        # each submission's jobs are named routing_test-<6 hex> (launch.submit): every one of them
        listed = subprocess.run(["squeue", "-h", "-o", "%A %j"], capture_output=True, text=True).stdout
        ids = sorted(
            {w[0] for line in listed.splitlines() if len(w := line.split()) == 2 and w[1].startswith("routing_test")}
        )
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)
        partition("UP")
