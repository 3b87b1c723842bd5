"""Crashes and races against `python -m training` as real processes.

The SIGKILL loop kills one run again and again - at seeded random points of named phases
(RESIDUAL_KILL_AT, interp.files.io.kill_point) and at seeded random delays after a new metrics
record appears - and checks that its results end bit for bit as an uninterrupted run's.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, data_root

from interp import load_checkpoint
from interp.files.io import read_jsonl

ARGS = ["--preset", "smoke", "--no-progress", "--set", "dropout=0.1"]  # 40 steps, checkpoints at 10, 20, 30, 40
RUN = "smoke/full/seed1337"
TIMES = ("wall_time_s", "tokens_per_s", "mfu", "peak_matmul_flops", "resumed_from_step")


def start(out: Path, kill_at: str | None = None, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "RESIDUAL_DATA_DIR": str(data_root()), "OMP_NUM_THREADS": "1"}
    env.pop("RESIDUAL_KILL_AT", None)
    if kill_at:
        env["RESIDUAL_KILL_AT"] = kill_at
    return subprocess.Popen(
        [sys.executable, "-m", "training", "--out", str(out), *ARGS, *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def results(run: Path) -> tuple:
    """What must be bitwise equal: final.json minus times, metrics minus throughput, probe lines."""
    final = {k: v for k, v in json.loads((run / "final.json").read_text()).items() if k not in TIMES}
    metrics = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in read_jsonl(run / "metrics.jsonl")]
    return final, metrics, (run / "probes.jsonl").read_bytes()


def reachable(run: Path) -> dict[str, int]:
    """Phase -> the largest n to kill at, so that a kill there always lands and the run moves on slowly."""
    step = load_checkpoint(run / "ckpt.pt").state["step"] if (run / "ckpt.pt").exists() else None
    if step is None:
        return {"config.json": 1, "step": 12, "ckpt.pt": 2}
    phases = {"metrics.jsonl": 1}  # the rewrite on resume
    if step >= 30:
        phases["final.json"] = 1
    phases["ckpt.pt"] = min(2, 1 + sum(1 for k in (10, 20, 30) if k > step))
    if step < 40:
        phases["step"] = min(12, 40 - step)
    return phases


@pytest.mark.slow
def test_sigkill_at_random_points_ends_bitwise_equal(shared_data, tmp_path):
    rng = random.Random(11)
    run = tmp_path / "killed" / RUN
    kills = []
    while len(kills) < 12:
        phases = reachable(run)
        if len(kills) % 3 == 1 and "step" in phases:  # every third kill: a random delay after a new record
            before = (run / "metrics.jsonl").stat().st_mtime_ns if (run / "metrics.jsonl").exists() else 0
            p = start(tmp_path / "killed")
            while p.poll() is None and not (
                (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").stat().st_mtime_ns != before
            ):
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 1.0))
            p.send_signal(signal.SIGKILL)
            p.wait()
            if p.returncode == 0:  # it finished before the kill: train this run again from nothing
                shutil.rmtree(tmp_path / "killed")
                continue
            where = "delay"
        else:
            phase = rng.choice(sorted(phases))
            where = f"{phase}:{rng.randint(1, phases[phase])}"
            p = start(tmp_path / "killed", where)
            p.wait()
        assert p.returncode == -signal.SIGKILL, (where, p.stderr.read())
        assert not (run / "final.json").exists()
        kills.append((where, load_checkpoint(run / "ckpt.pt").state["step"] if (run / "ckpt.pt").exists() else None))
    print("kills (phase:n, checkpoint step after):", kills)
    left = list(run.glob(".*.tmp"))
    p = start(tmp_path / "killed")
    assert p.wait() == 0, p.stderr.read()
    assert not list(run.glob(".*.tmp")), "temporary files of killed writers were not removed"
    straight = start(tmp_path / "straight")
    assert straight.wait() == 0, straight.stderr.read()
    assert results(run) == results(tmp_path / "straight" / RUN)
    phases = {w.split(":")[0] for w, _ in kills}
    assert {"step", "ckpt.pt", "metrics.jsonl", "final.json", "delay"} <= phases, phases
    print(f"{len(kills)} kills at {sorted(phases)}; temp files left by the last kill: {len(left)}")


def test_two_processes_one_run_directory(shared_data, tmp_path):
    """Started together: one trains, the other is refused naming the holder; the run is whole."""
    a, b = start(tmp_path, None, "--set", "max_steps=60"), start(tmp_path, None, "--set", "max_steps=60")
    done = {p.pid: (p.wait(timeout=600), p.stderr.read()) for p in (a, b)}
    codes = sorted(rc for rc, _ in done.values())
    assert codes == [0, 2], done
    winner = next(pid for pid, (rc, _) in done.items() if rc == 0)
    lines = [line for rc, err in done.values() if rc == 2 for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(rf"^error: .*{RUN} is being trained by pid {winner} on ", lines[0]), lines
    print("refused:", lines[0])
    run = tmp_path / RUN
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 60
    probe_keys = [(r["step"], r["probe"]) for r in read_jsonl(run / "probes.jsonl")]
    assert len(probe_keys) == len(set(probe_keys))
    assert load_checkpoint(run / "ckpt.pt").state["step"] == 60 and (run / "final.json").is_file()
    assert not (run / ".lock.holder").exists()
