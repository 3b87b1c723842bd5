"""The trainer: determinism, kill-and-resume, DDP equivalence, bad input, run-directory contract."""

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO, InterruptAt, free_port, run_module

from interp import load_checkpoint
from interp.errors import ConfigError
from probes import default_callbacks
from training.loop import TrainingError, TrainingInterrupted
from training.optimizer import lr_at
from training.presets import TrainConfig, parse_value, resolve
from training.rundir import RunDirError
from training.trainer import Trainer


def smoke(**overrides):
    spec = resolve("smoke", {"probes": False, **overrides})
    return spec.model, spec.train


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_same_seed_gives_bitwise_identical_losses(data, tmp_path):
    finals = [Trainer(*smoke(), tmp_path / f"run{i}", progress=False).run() for i in range(2)]
    a, b = metrics(tmp_path / "run0"), metrics(tmp_path / "run1")
    strip = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in a]
    assert strip == [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in b]
    assert finals[0]["final_val_loss"] == finals[1]["final_val_loss"]
    other = Trainer(*smoke(seed=7), tmp_path / "seed7", progress=False).run()
    assert other["final_val_loss"] != finals[0]["final_val_loss"]


def test_eval_from_evaluates_the_second_half_and_leaves_training_untouched(data, tmp_path):
    """eval_from drops the early evaluations only: the same weights, the same numbers where both evaluate."""
    runs = {f: Trainer(*smoke(eval_from=f), tmp_path / f"from{f}", progress=False) for f in (0.0, 0.5)}
    finals = {f: t.run() for f, t in runs.items()}
    every, half = metrics(tmp_path / "from0.0"), metrics(tmp_path / "from0.5")
    assert [r["step"] for r in half if "val_loss" in r] == [20, 30, 40] == runs[0.5].train_cfg.eval_steps()
    assert [r["step"] for r in every if "val_loss" in r] == [0, 10, 20, 30, 40]
    late = {r["step"]: r["val_loss"] for r in every if "val_loss" in r and r["step"] >= 20}
    assert late == {r["step"]: r["val_loss"] for r in half if "val_loss" in r}
    assert [r.get("train_loss") for r in every] == [r.get("train_loss") for r in half]
    weights = [t.model.state_dict() for t in runs.values()]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert finals[0.0]["final_val_loss"] == finals[0.5]["final_val_loss"]
    best = min((r["val_loss"], r["step"]) for r in half if "val_loss" in r)
    assert (finals[0.5]["best_val_loss"], finals[0.5]["best_step"]) == best


def test_resumed_under_a_later_eval_from_the_run_records_it(data, tmp_path):
    """Stopped at 15 (checkpoint at 10), resumed evaluating from step 20 on: training is the same as one
    uninterrupted run, and config.json says eval_from 0.5, so a later eval_from=0 request is refused
    (the run lacks the evaluation at 10) and the message names the field."""
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted):
        Trainer(*smoke(eval_from=0.0), run, callbacks=[InterruptAt(15)], progress=False).run()
    final = Trainer(*smoke(eval_from=0.5), run, progress=False).run()
    assert [r["step"] for r in metrics(run) if "val_loss" in r] == [0, 20, 30, 40]
    assert json.loads((run / "config.json").read_text())["train"]["eval_from"] == 0.5
    whole = Trainer(*smoke(), tmp_path / "whole", progress=False).run()
    assert final["final_val_loss"] == whole["final_val_loss"]
    with pytest.raises(RunDirError, match=r"different configuration \(train\.eval_from 0\.5 -> 0\.0\)"):
        Trainer(*smoke(eval_from=0.0), run, progress=False).run()


@pytest.mark.parametrize("value", [-0.1, 1.5, True, math.nan])
def test_eval_from_outside_zero_to_one_is_refused(value):
    with pytest.raises(ConfigError, match="eval_from"):
        TrainConfig(eval_from=value)


def test_eval_steps_always_include_the_last_step():
    assert TrainConfig(max_steps=95, eval_interval=10, eval_from=0.5).eval_steps() == [50, 60, 70, 80, 90, 95]
    assert TrainConfig(max_steps=95, eval_interval=10, eval_from=1.0).eval_steps() == [95]
    assert TrainConfig(max_steps=200, eval_interval=10, eval_from=0.55).eval_steps()[0] == 110  # 110.00000000000001
    assert TrainConfig(max_steps=100, eval_interval=7, eval_from=0.07).eval_steps()[0] == 7
    assert resolve("cpu-quick", {"eval_from": parse_value("eval_from", "0")}).train.eval_steps()[:2] == [0, 100]


def test_finished_run_is_not_retrained(data, tmp_path):
    Trainer(*smoke(), tmp_path, progress=False).run()
    stamp = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    again = Trainer(*smoke(), tmp_path, progress=False).run()
    assert again == json.loads((tmp_path / "final.json").read_text())
    assert stamp == {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from training.presets import resolve
    from training.trainer import Trainer
    from probes import default_callbacks

    class Kill:
        def on_step(self, trainer, step, loss):
            if step == int(sys.argv[2]):
                os.kill(os.getpid(), signal.SIGKILL)

    spec = resolve("smoke", {"dropout": 0.1})
    cbs = default_callbacks(spec.train) + [Kill()]
    Trainer(spec.model, spec.train, sys.argv[1], callbacks=cbs, progress=False).run()
    """
)


def test_sigkill_and_resume_ends_bitwise_equal(data, tmp_path):
    """Killed at step 25 (last checkpoint at 20), rerun, and compare with an uninterrupted run."""
    env = {**os.environ, "RESIDUAL_DATA_DIR": str(data), "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path / "killed"), "25"], env=env, cwd=REPO)
    assert killed.returncode == -9
    assert not (tmp_path / "killed" / "final.json").exists()
    assert load_checkpoint(tmp_path / "killed" / "ckpt.pt").state["step"] == 20
    subprocess.run([sys.executable, "-c", KILLER, str(tmp_path / "killed"), "-1"], env=env, cwd=REPO, check=True)
    spec = resolve("smoke", {"dropout": 0.1})  # the same run, uninterrupted, in this process
    callbacks = default_callbacks(spec.train)
    Trainer(spec.model, spec.train, tmp_path / "straight", callbacks=callbacks, progress=False).run()
    a = json.loads((tmp_path / "killed" / "final.json").read_text())
    b = json.loads((tmp_path / "straight" / "final.json").read_text())
    assert a["resumed_from_step"] == 20 and b["resumed_from_step"] == 0
    assert a["final_val_loss"] == b["final_val_loss"] and a["best_val_loss"] == b["best_val_loss"]
    drop = ("tokens_per_s",)
    clean = lambda rows: [{k: v for k, v in r.items() if k not in drop} for r in rows]  # noqa: E731
    assert clean(metrics(tmp_path / "killed")) == clean(metrics(tmp_path / "straight"))
    probes = lambda d: (d / "probes.jsonl").read_text().splitlines()  # noqa: E731
    assert probes(tmp_path / "killed") == probes(tmp_path / "straight")


def test_torchrun_two_ranks_match_single_process(data, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed beside this python")
    args = [
        "--preset",
        "smoke",
        "--no-progress",
        "--set",
        "max_steps=20",
        "--set",
        "log_interval=1",
        "--set",
        "probes=false",
        "--set",
        "eval_interval=100",
    ]
    env = {**os.environ, "RESIDUAL_DATA_DIR": str(data), "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, "-m", "training", "--out", str(tmp_path / "one"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    ddp = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "-m",
            "training",
            "--out",
            str(tmp_path / "two"),
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    one = [r["train_loss"] for r in metrics(tmp_path / "one/smoke/full/seed1337") if "train_loss" in r]
    two = [r["train_loss"] for r in metrics(tmp_path / "two/smoke/full/seed1337") if "train_loss" in r]
    assert len(one) == len(two) == 20
    worst = max(abs(a - b) for a, b in zip(one, two, strict=True))
    print(f"max |single - torchrun x2| train loss over 20 steps: {worst:.3g}")
    assert worst <= 1e-5
    assert json.loads((tmp_path / "two/smoke/full/seed1337/final.json").read_text())["world_size"] == 2


def test_grad_accum_equals_the_large_batch(data, tmp_path):
    """batch 4 x grad_accum 2 sees the same 8 windows per step as batch 8 (one generator, drawn in order),
    so every step's loss, pre-clip gradient norm and the final weights match up to float summation order."""
    common = dict(max_steps=6, log_interval=1, eval_interval=100, ckpt_interval=100)
    big = Trainer(*smoke(batch_size=8, grad_accum=1, **common), tmp_path / "big", progress=False)
    accum = Trainer(*smoke(batch_size=4, grad_accum=2, **common), tmp_path / "accum", progress=False)
    big.run(), accum.run()
    rows = {name: [r for r in metrics(tmp_path / name) if "train_loss" in r] for name in ("big", "accum")}
    assert len(rows["big"]) == len(rows["accum"]) == 6
    for a, b in zip(rows["big"], rows["accum"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)  # Adam would hide a lost 1/grad_accum
    w_big, w_accum = (load_checkpoint(tmp_path / n / "ckpt.pt").weights for n in ("big", "accum"))
    for name, w in w_big.items():
        torch.testing.assert_close(w_accum[name], w, rtol=1e-4, atol=1e-5)
    other = Trainer(*smoke(batch_size=4, grad_accum=1, **common), tmp_path / "half", progress=False)
    other.run()  # the control: half the batch is a different run
    assert [r["train_loss"] for r in metrics(tmp_path / "half") if "train_loss" in r][1] != rows["big"][1]["train_loss"]


def test_cli_trains_on_the_synthetic_corpus_without_any_data_dir(tmp_path):
    result = run_module(
        "training",
        "--preset",
        "smoke",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--set",
        "corpus=synthetic",
        "--set",
        "max_steps=10",
        "--set",
        "probes=false",
        env={"RESIDUAL_DATA_DIR": str(tmp_path / "absent"), "RESIDUAL_CACHE_DIR": str(tmp_path / "c")},
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "smoke/full/seed1337/config.json").read_text())
    assert config["train"]["corpus"] == "synthetic" and config["model"]["d_vocab"] == 32
    final = json.loads((tmp_path / "smoke/full/seed1337/final.json").read_text())
    assert final["final_val_loss"] < math.log(32)  # it learned something from the chain


class PoisonAt:
    def __init__(self, step):
        self.step = step

    def on_step(self, trainer, step, loss):
        if step == self.step:
            with torch.no_grad():
                trainer.model.blocks[0].mlp.in_proj.weight.fill_(math.nan)


def test_nan_loss_stops_with_last_good_checkpoint(data, tmp_path):
    with pytest.raises(TrainingError, match="loss became nan at step 16.*last good checkpoint"):
        Trainer(*smoke(), tmp_path, callbacks=[PoisonAt(15)], progress=False).run()
    assert load_checkpoint(tmp_path / "ckpt.pt").state["step"] == 10
    assert not (tmp_path / "final.json").exists()


def test_other_config_in_run_dir_is_refused(data, tmp_path):
    Trainer(*smoke(max_steps=10), tmp_path, progress=False).run()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    (tmp_path / "final.json").unlink()
    with pytest.raises(RunDirError, match="different configuration"):
        Trainer(*smoke(max_steps=10, lr=1e-2), tmp_path, progress=False).run()
    assert all((tmp_path / n).read_bytes() == b for n, b in before.items() if n != "final.json")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--set", "n_layer=3"], "unknown field 'n_layer'"),
        (["--set", "lr=fast"], "lr expects a number"),
        (["--set", "max_steps=1.5"], "max_steps expects an integer"),
        (["--set", "tie_embeddings=maybe"], "expects true or false"),
        (["--set", "lr"], "expects KEY=VALUE"),
        (["--data", "/nonexistent/input.txt"], "/nonexistent/input.txt"),
        (["--set", "n_ctx=2000000"], "n_ctx 2000000 is longer than the data"),
        (["--set", "d_model=33"], "divisible by n_heads"),
    ],
)
def test_cli_bad_input_is_one_error_line(tmp_path, args, message):
    result = (
        run_module("training", "--preset", "smoke", "--out", str(tmp_path), *args)
        if "--preset" not in args
        else run_module("training", "--out", str(tmp_path), *args)
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_corrupt_data_and_existing_run_untouched(data, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00 not text")
    result = run_module("training", "--preset", "smoke", "--out", str(tmp_path / "out"), "--data", str(bad))
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    run_dir = tmp_path / "out/smoke/full/seed1337"
    Trainer(*smoke(max_steps=10), run_dir, meta={"preset": "smoke", "variant": "full"}, progress=False).run()
    (run_dir / "final.json").unlink()
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    clash = run_module(
        "training",
        "--preset",
        "smoke",
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
        "--set",
        "max_steps=10",
        "--set",
        "probes=false",
        "--set",
        "lr=0.01",
    )
    assert clash.returncode == 2 and "different configuration" in clash.stderr
    assert before == {p.name: p.read_bytes() for p in run_dir.iterdir()}


def test_help_lists_presets_and_fields():
    result = run_module("training", "--help")
    assert result.returncode == 0
    for word in ("cpu-quick", "paper-10m", "paper-124m", "nanogpt-10m", "smoke", "residual", "warmup_steps"):
        assert word in result.stdout


def test_lr_schedule_warmup_then_cosine():
    cfg = TrainConfig(max_steps=100, warmup_steps=10, lr=1.0, min_lr=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(55, cfg) == pytest.approx(0.55)
    assert lr_at(100, cfg) == pytest.approx(0.1)
    assert lr_at(50, TrainConfig(lr_schedule="constant", lr=0.3, min_lr=0.3)) == 0.3


def test_presets_match_the_paper():
    p10 = resolve("paper-10m")
    assert (p10.model.n_layers, p10.model.d_model, p10.model.n_heads, p10.model.n_ctx) == (6, 384, 6, 256)
    assert (p10.train.batch_size, p10.train.max_steps, p10.train.lr, p10.train.min_lr) == (64, 3000, 3e-4, 3e-5)
    assert p10.model.dropout == 0.2 and p10.train.eval_batches == 50 and p10.model.tie_embeddings
    p124 = resolve("paper-124m")
    assert (p124.model.n_layers, p124.model.d_model, p124.model.n_ctx, p124.model.d_vocab) == (12, 768, 1024, 50257)
    assert (p124.train.batch_size, p124.train.grad_accum, p124.train.max_steps) == (16, 8, 20000)
    nano = resolve("nanogpt-10m")
    assert not nano.model.tie_embeddings and nano.train.val_mode == "random" and nano.train.lr_schedule == "constant"
    assert parse_value("self_bias", "inf") == math.inf
