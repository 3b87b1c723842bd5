"""Child processes: peak resident memory, one measurement per process, and `python -m training` in one.

A child is `python -m benchmarks.step` with a hidden flag (--memory-child, --training-child); it prints
its peak as a line starting with RSS_MARK, which the parent reads back.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.reference import RefGPT
from benchmarks.shapes import BenchError, Shape, fixed_token_batches, make_shape
from benchmarks.variants import train_step
from interp.model.gpt import ResidualGPT
from training.optimizer import make_optimizer


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    VmHWM belongs to the process's own address space, which exec replaces; ru_maxrss
    would carry over the parent's peak through exec (Linux), so it is only the fallback.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


RSS_MARK = "peak_rss_mb="


def run_child(argv: list[str], threads: int) -> tuple[str, float, float]:
    """Run `python -m benchmarks.step <argv>`; return (output, its peak RSS in MB, wall seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.step", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    marks = [line for line in proc.stdout.splitlines() if line.startswith(RSS_MARK)]
    if proc.returncode or not marks:
        raise BenchError(f"child run {' '.join(argv)} failed:\n{out[-2000:]}")
    return out, float(marks[-1][len(RSS_MARK) :]), wall


def memory_child(kind: str, shape_name: str, sets: list[str]) -> None:
    """In a child: report the peak after imports, then build `kind` (reference, residual) and take two steps."""
    print(f"imports_{RSS_MARK}{peak_rss_mb()}")
    shape = make_shape(shape_name, 1, 1, sets)
    torch.manual_seed(0)
    model = RefGPT(shape.model) if kind == "reference" else ResidualGPT(shape.model)
    opt = make_optimizer(model, shape.train, torch.device("cpu"))
    for x, y in fixed_token_batches(shape, 2):
        train_step(model, opt, x, y, shape.grad_clip)


def set_args(shape: Shape) -> list[str]:
    return [arg for item in shape.sets for arg in ("--set", item)]


def measure_memory(shape: Shape, threads: int) -> dict[str, float]:
    result = {}
    for kind in ("reference", "residual"):
        out, rss, _ = run_child(["--memory-child", kind, "--shapes", shape.name, *set_args(shape)], threads)
        imports = [line for line in out.splitlines() if line.startswith(f"imports_{RSS_MARK}")]
        result[f"{kind}_imports_mb"] = float(imports[-1].split("=")[1])
        result[{"reference": "reference_mb", "residual": "residual_gpt_mb"}[kind]] = rss
    result["imports_mb"] = min(result.pop("reference_imports_mb"), result.pop("residual_imports_mb"))
    return result


def measure_trainer_command(shape: Shape, threads: int, max_steps: int | None) -> dict[str, float]:
    """`python -m training --preset SHAPE` in a child: its peak memory and wall time, imports included."""
    with tempfile.TemporaryDirectory() as out_dir:
        argv = ["--preset", shape.name, "--out", out_dir, "--no-progress", *set_args(shape)]
        if max_steps:
            argv += ["--set", f"max_steps={max_steps}"]
        _, rss, wall = run_child(["--training-child", "--", *argv], threads)
        (final_path,) = Path(out_dir).glob("**/final.json")
        final = json.loads(final_path.read_text())
    return {"trainer_run_mb": rss, "command_wall_s": wall, "run_wall_s": final["wall_time_s"], "steps": final["steps"]}
