"""python -m benchmarks.step runs on the tiny shape and reports finite ratios (no wall-clock assertions)."""

import json
import math

import pytest
from conftest import run_module


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_step_benchmark_json_on_the_tiny_shape(shared_data):
    proc = run_module(
        "benchmarks.step",
        "--shapes",
        "smoke",
        "--steps",
        "1",
        "--rounds",
        "2",
        "--threads",
        "1",
        "--json",
        "--trainer-steps",
        "12",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    machine = report["machine"]
    assert machine["threads"] == 1 and _positive(machine["peak_matmul_flops"])
    shape = report["shapes"]["smoke"]
    assert shape["shape"]["n_layers"] == 2 and shape["shape"]["batch_size"] == 8
    variants = shape["variants"]
    expected = {
        "reference",
        "full",
        "attn_only",
        "ffn_only",
        "none",
        "full+uniform",
        "full+position_blind",
        "full/masked",
        "full/explicit",
        "full/no_hooks",
    }
    assert expected <= set(variants)
    assert variants["reference"]["ratio"] == 1.0
    for name, v in variants.items():
        assert all(_positive(v[k]) for k in ("ms_per_step", "ratio", "mfu")), name
        assert len(v["round_ratios"]) == 2
    assert variants["full"]["n_params"] == variants["reference"]["n_params"]  # same shape, same weights
    trainer = shape["trainer"]
    assert trainer["steps"] == 12
    for key in ("steady_ratio", "whole_run_ratio", "steps_per_minute", "reference_ms"):
        assert _positive(trainer[key]), key
    assert trainer["reference_samples"] == 12  # one interleaved reference step after each trainer step
    costs = shape["costs"]  # the trainer's evaluation, probes and checkpoints, counted at smoke's intervals
    assert costs["evaluation"]["count"] == 3 and costs["checkpoint"]["count"] == 2  # steps 0, 10, 12; at 10 and the end
    assert all(math.isfinite(c["ms_per_step"]) for c in costs.values())
    memory = shape["memory"]
    assert all(_positive(memory[k]) for k in ("imports_mb", "reference_mb", "residual_gpt_mb", "trainer_run_mb"))
    assert memory["steps"] == 12


def test_unknown_shape_is_one_error_line():
    proc = run_module("benchmarks.step", "--shapes", "huge", "--no-trainer", "--no-memory")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: unknown shape 'huge'; shapes: smoke, cpu-quick, paper-10m"]


def test_set_overrides_reach_the_trainer_run_and_its_costs(shared_data):
    proc = run_module(
        "benchmarks.step",
        "--shapes",
        "smoke",
        "--steps",
        "1",
        "--rounds",
        "1",
        "--threads",
        "1",
        "--json",
        "--trainer-steps",
        "12",
        "--variants",
        "full",
        "--no-memory",
        "--set",
        "eval_from=0.5",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["overrides"] == {"eval_from": 0.5}
    shape = report["shapes"]["smoke"]
    assert shape["trainer"]["train_config"]["eval_from"] == 0.5
    assert shape["costs"]["evaluation"]["count"] == 2  # steps 10 and 12: none before step 6


def test_bad_set_is_one_error_line():
    proc = run_module("benchmarks.step", "--shapes", "smoke", "--no-trainer", "--no-memory", "--set", "eval_from=2")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "eval_from" in lines[0], proc.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shapes", ""], "empty entry"),
        (["--shapes", "smoke,"], "empty entry"),
        (["--shapes", "smoke,smoke"], "more than once"),
        (["--shapes", "smoke", "--memory", "bogus"], "unknown shape"),
        (["--shapes", "smoke", "--trainer", "smoke,,cpu-quick"], "empty entry"),
    ],
)
def test_shape_lists_are_checked_before_any_work(argv, message, capsys):
    from benchmarks.step import main

    assert main([*argv, "--no-trainer", "--no-memory"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]
