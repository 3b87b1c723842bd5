"""On a CUDA device (`pytest -m cuda`, stage a of `make gpu-check`): what a GPU run must keep of the CPU's
contracts. Every test skips without CUDA, so `make test` collects them and skips them here.

- an ensemble member's losses at its first steps are its solo run's, within float order (float32) or bf16's
  rounding (bfloat16 autocast); a shape today's grouping trains alone is skipped, naming why;
- a run killed mid-way and resumed ends bitwise equal to one that was not, solo (dropout 0.2, bf16: the CUDA
  dropout masks and the autocast step) and as an ensemble;
- a checkpoint written on CUDA loads in a process that sees no GPU and exports to a HookedTransformer whose
  logits are the model's (the export's own check, and 1e-4 against the CUDA model's logits in float32);
- evaluating a trained paper-10m model under bf16 autocast gives its float32 validation loss within
  BF16_EVAL_TOL nats.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, data_root

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: `make gpu-check` runs these on a GPU"),
]

FIRST_STEPS = 5
MEMBER_TOL = {"float32": 1e-3, "bfloat16": 3e-2}  # nats, a member's train loss against its solo run's
# bf16 evaluation against fp32: a fifth of the routing test's 0.05-nat margin, so no place or verdict moves
BF16_EVAL_TOL = 0.01
SMALL = ["--preset", "phase-cell", "--residual", "full", "--no-progress", "--set", "device=cuda"]
SHORT = [f"--set={s}" for s in ("max_steps=12", "log_interval=1", "eval_interval=6", "eval_batches=2")]
SHORT += ["--set=ckpt_interval=4"]


def data_dir() -> str:
    """The corpus `make gpu-check` points at (TinyShakespeare), else the tests' own (conftest.data_root)."""
    return os.environ.get("RESIDUAL_DATA_DIR") or str(data_root())


def train(*argv: str) -> None:
    """python -m training ARGV in this process (imports once)."""
    from training.__main__ import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", data_dir())
        assert main(list(argv)) == 0


def losses(run: Path) -> list[tuple[int, float, float | None]]:
    """(step, train loss, val loss) of every metrics.jsonl line that has a train loss."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["train_loss"], r.get("val_loss")) for r in rows if "train_loss" in r]


def runs(out: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in sorted(out.glob("*/*/seed*/final.json"))}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_an_ensemble_member_equals_its_solo_run_at_the_first_steps(dtype, dropout, tmp_path):
    sets = [f"--set=dtype={dtype}", f"--set=dropout={dropout}"]
    train(*SMALL, *SHORT, *sets, "--seeds", "1,2,3", "--ensemble-size", "3", "--out", str(tmp_path / "ens"))
    ensemble = runs(tmp_path / "ens")
    finals = {s: json.loads((p / "final.json").read_text()) for s, p in ensemble.items()}
    if not all(f.get("ensemble") for f in finals.values()):
        pytest.skip(f"dtype {dtype}, dropout {dropout}: trained alone, not as an ensemble (training.grouping)")
    train(*SMALL, *SHORT, *sets, "--seeds", "1,2,3", "--ensemble-size", "1", "--out", str(tmp_path / "solo"))
    solo = runs(tmp_path / "solo")
    assert set(solo) == set(ensemble) == {"seed1", "seed2", "seed3"}
    for seed in solo:
        a, b = losses(ensemble[seed])[:FIRST_STEPS], losses(solo[seed])[:FIRST_STEPS]
        assert [r[0] for r in a] == [r[0] for r in b] == list(range(FIRST_STEPS))
        worst = max(abs(x[1] - y[1]) for x, y in zip(a, b, strict=True))
        assert worst <= MEMBER_TOL[dtype], f"{seed}: member and solo train losses differ by {worst:.2e}"


def _killed_at(step: int, out: Path, argv: list[str]) -> None:
    """The same command in a child that SIGKILLs itself after `step` optimizer steps (interp.files.io.kill_point)."""
    env = {**os.environ, "RESIDUAL_DATA_DIR": data_dir(), "RESIDUAL_KILL_AT": f"step:{step}"}
    done = subprocess.run(
        [sys.executable, "-m", "training", *argv, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]


@pytest.mark.parametrize(
    "how",
    [
        ["--seed", "7", "--set=dropout=0.2", "--set=dtype=bfloat16"],
        ["--seeds", "7,8", "--ensemble-size", "2", "--set=dropout=0.0"],
    ],
    ids=["solo-dropout-bf16", "ensemble"],
)
def test_a_run_killed_and_resumed_ends_bitwise_equal(how, tmp_path):
    argv = [*SMALL, *SHORT, *how]
    train(*argv, "--out", str(tmp_path / "whole"))
    _killed_at(6, tmp_path / "cut", argv)
    train(*argv, "--out", str(tmp_path / "cut"))  # resumes from step 4's checkpoint
    whole, cut = runs(tmp_path / "whole"), runs(tmp_path / "cut")
    assert set(whole) == set(cut) and whole
    for seed in whole:
        assert losses(cut[seed]) == losses(whole[seed]), seed
        final = [json.loads((r[seed] / "final.json").read_text()) for r in (whole, cut)]
        assert final[0]["final_val_loss"] == final[1]["final_val_loss"]
        assert final[1].get("resumed_from_step") == 4


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cuda_run")
    train(*SMALL, *SHORT, "--seed", "3", "--set=dtype=bfloat16", "--out", str(out))
    return next(iter(runs(out).values()))


LOAD_ON_CPU = """
import sys, torch
from interp.model.gpt import ResidualGPT
from interp.tl.hooked import to_hooked_transformer
assert not torch.cuda.is_available()
model = ResidualGPT.from_checkpoint(sys.argv[1])
tokens = torch.load(sys.argv[2])
tl = to_hooked_transformer(model)
with torch.no_grad():
    ours, theirs = model(tokens)[0], tl(tokens)
print(float((ours - theirs).abs().max()))
torch.save(ours, sys.argv[3])
"""


def test_a_cuda_checkpoint_loads_on_a_cpu_and_exports_exactly(cuda_run, tmp_path):
    from interp.model.gpt import ResidualGPT

    tokens = torch.randint(0, 65, (2, 32), generator=torch.Generator().manual_seed(0))
    torch.save(tokens, tmp_path / "tokens.pt")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-c", LOAD_ON_CPU, str(cuda_run / "ckpt.pt"), str(tmp_path / "tokens.pt")]
    done = subprocess.run([*argv, str(tmp_path / "cpu.pt")], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) <= 1e-5  # the export against the model, both on the CPU
    model = ResidualGPT.from_checkpoint(cuda_run / "ckpt.pt", map_location="cuda")
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            on_cuda = model(tokens.cuda())[0].cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    assert (on_cuda - torch.load(tmp_path / "cpu.pt")).abs().max() <= 1e-4


def test_bf16_evaluation_is_fp32_within_the_stated_tolerance(tmp_path):
    from interp.model.gpt import ResidualGPT
    from training.batches import fixed_batches
    from training.data import load_corpus
    from training.trainer import mean_loss

    sets = ["max_steps=150", "eval_interval=150", "eval_batches=4", "ckpt_interval=150", "probes=false"]
    train("--preset", "paper-10m", "--residual", "attn_only", "--seed", "1", "--no-progress", "--out", str(tmp_path),
          "--set=dtype=bfloat16", *(f"--set={s}" for s in sets))  # fmt: skip
    [run] = runs(tmp_path).values()
    model = ResidualGPT.from_checkpoint(run / "ckpt.pt", map_location="cuda")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", data_dir())
        corpus = load_corpus("shakespeare_char", None)
    batches = fixed_batches(corpus.val, model.cfg.n_ctx, 64, 8)
    device = torch.device("cuda")
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        fp32 = mean_loss(model, batches, device)
        bf16 = mean_loss(model, batches, device, torch.autocast("cuda", dtype=torch.bfloat16))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    start = losses(run)[0][2]  # the validation loss at step 0
    assert fp32 < start - 0.5, f"it learned little ({start:.3f} -> {fp32:.3f}): the comparison needs a trained model"
    assert abs(bf16 - fp32) <= BF16_EVAL_TOL, f"bf16 {bf16:.4f} vs fp32 {fp32:.4f}"
