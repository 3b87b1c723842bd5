"""Sweeps through submitit (its local executor: real subprocesses), against the local launcher."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from experiments.cluster.launch import job_command, without
from experiments.routing_test import run as routing_test

pytest.importorskip("submitit")

main = routing_test.EXPERIMENT.main
ARGS = ["--preset", "smoke", "--variants", "attn_only", "--set", "max_steps=300", "--no-report", "--no-progress"]


def numbers(out: Path) -> list:
    results = json.loads((out / "smoke" / "results-routing_test.json").read_text())
    return [
        (
            r["variant"],
            r["seed"],
            r["final_val_loss"],
            r["val_curve"],
            r["train_curve"],
            r["alpha_tt"],
            r["block0_grad"],
        )
        for r in results["runs"]
    ]


def children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if re.search(rf"^PPid:\s+{pid}$", status.read_text(), re.M):
                found.append(int(status.parent.name))
        except OSError:
            continue
    return found


def test_slurm_local_equals_local_and_a_killed_job_is_resubmitted(tmp_path, shared_data, capsys):
    assert main([*ARGS, "--out", str(tmp_path / "local")]) == 0
    out = tmp_path / "slurm"
    capsys.readouterr()
    assert main([*ARGS, "--out", str(out), "--launcher", "slurm-local", "--no-wait"]) == 0
    printed = capsys.readouterr().out
    job_ids = re.findall(r"^  (\d+)  attn_only seed 1337$", printed, re.M)
    assert len(job_ids) == 1 and "--collect" in printed
    run = out / "smoke" / "attn_only" / "seed1337"
    deadline = time.time() + 120
    while not (run / "ckpt.pt").exists():  # training has started and checkpointed: kill it halfway
        assert time.time() < deadline, "the submitted job never checkpointed"
        time.sleep(0.02)
    tasks = children(int(job_ids[0]))
    assert tasks, "no task process under the submitit controller"
    for pid in tasks:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert not (run / "final.json").exists()

    # collecting now is an error naming the unfinished run; the rerun resubmits it and it finishes
    assert main([*ARGS, "--out", str(out), "--launcher", "slurm-local", "--collect"]) == 2
    assert "not finished yet: attn_only seed 1337" in capsys.readouterr().err
    assert main([*ARGS, "--out", str(out), "--launcher", "slurm-local"]) == 0
    assert "submitted 1 job(s)" in capsys.readouterr().out
    final = json.loads((run / "final.json").read_text())
    assert 0 < final["resumed_from_step"] < 300
    assert numbers(out) == numbers(tmp_path / "local")  # bit for bit, resumed or not

    # nothing left to do: the rerun submits nothing and aggregates the same numbers
    assert main([*ARGS, "--out", str(out), "--launcher", "slurm-local"]) == 0
    assert "submitted" not in capsys.readouterr().out
    assert numbers(out) == numbers(tmp_path / "local")


def test_without_drops_options_and_their_values():
    argv = ["--preset", "smoke", "--launcher", "slurm", "--out=x", "--no-wait", "--out", "y", "--seeds", "1"]
    assert without(argv, "--out", "--no-wait", "--launcher") == ["--preset", "smoke", "--seeds", "1"]


def test_a_cluster_jobs_command_line_replans_under_the_local_rules(tmp_path, shared_data):
    """A job re-plans from the command line less the launcher's options; Slurm-only ones left in it were refused
    there (a job of `--launcher slurm --slurm-partition gpu` failed with '... need --launcher slurm')."""
    argv = [*ARGS, "--launcher", "slurm", "--slurm-partition", "gpu", "--slurm-time=30", "--gpus-per-run", "1"]
    argv += ["--slurm-set", "slurm_mem_gb=8", "--slurm-array-parallelism", "2", "--no-wait", "--out", "elsewhere"]
    job = job_command(argv, tmp_path)
    assert job == [*ARGS, "--out", str(tmp_path), "--no-progress"]
    ctx, jobs = routing_test.EXPERIMENT.context(job)  # refused before: the local launcher's check
    assert ctx.args.launcher == "local" and len(jobs) == 1
    # argparse took unique prefixes as the options: the job's line leaves them out as well
    short = [*ARGS, "--launch", "slurm", "--no-w", "--slurm-t", "5", "--gpus=2", "--slurm-p", "gpu", "--ou", "x"]
    assert job_command(short, tmp_path) == [*ARGS, "--out", str(tmp_path), "--no-progress"]
    assert job_command([*ARGS, "--no-report"], tmp_path)[: len(ARGS) + 1] == [*ARGS, "--no-report"]  # not --no-wait


def test_help_and_docs_say_the_exit_status_incomplete_and_how_to_test_on_slurm():
    """Audit 51 case 50: neither --help nor the docs said exit status 3, the 'incomplete' record, what Ctrl-C does
    to the jobs, or make test-slurm."""
    text = " ".join(routing_test.EXPERIMENT.parser().format_help().split())
    for said in ("3 incomplete", "'incomplete'", "130/143 interrupted", "leaves the Slurm jobs running", "scancel"):
        assert said in text, said
    assert "make test-slurm (scripts/slurm-cluster.sh)" in text
    docs = " ".join((Path(__file__).parents[1] / "docs" / "experiments.md").read_text().split())
    for said in ("**3** the sweep is **incomplete**", '"incomplete": {"unfinished"', "stops the waiting, not the jobs"):
        assert said in docs, said
    assert "`make test-slurm`" in docs and "scripts/slurm-cluster.sh" in docs and ".submitit/jobs.json" in docs
