"""Faults x entry points: a generated table, so the promise is tested on combinations, not examples.

Every fault is a way a run directory, a checkpoint or a command line goes wrong; every entry point is
a command a user runs (in process: main(argv)). Each applicable pair is one test. The promise
(docs/DESIGN.md contracts 5 and 7): the expected exit code (2 for a fault, 143 for SIGTERM), one
stderr line saying what happened, every file that existed byte-identical, no temporary file left,
no lock holder line left.

The default suite runs a covering subset (every fault and every entry point at least once, about a
third of the pairs); `pytest -m slow tests/test_faults.py` runs the rest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import data_root

import training.__main__ as training_cli
from experiments.eval_noise import run as eval_noise
from experiments.interventions import run as interventions
from experiments.residual_sweep import run as residual_sweep
from experiments.routing_test import run as routing_test
from interp import plot_attention, sample
from interp.files.checkpoint import HASH_KEY, content_hash

ARGS = ["--preset", "smoke", "--no-progress", "--set", "max_steps=10", "--set", "ckpt_interval=5"]
RUN = "smoke/full/seed1337"


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    """Built once: a finished smoke run of `full` (the run every entry point below reads or trains)."""
    root = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))
        assert training_cli.main(["--out", str(root), *ARGS]) == 0
    return root


# ----- entry points: (kind, call(out, ckpt, extra) -> exit code) -------------------------------------------
# kind "run": trains or reuses RUN; "ckpt": reads a checkpoint file.


def _experiment(module, *own):
    return lambda out, ckpt, extra: module.EXPERIMENT.main(["--out", str(out), *ARGS, "--no-report", *own, *extra])


ENTRIES = {
    "training": ("run", lambda out, ckpt, extra: training_cli.main(["--out", str(out), *ARGS, *extra])),
    "routing_test": ("run", _experiment(routing_test, "--variants", "full", "--no-identity")),
    "residual_sweep": ("run", _experiment(residual_sweep)),
    "eval_noise": ("run", _experiment(eval_noise, "--no-comparison", "--config", "full")),
    "interventions": ("run", _experiment(interventions, "--variants", "full", "--no-identity", "--val-batches", "1")),
    "interp.sample": (
        "ckpt",
        lambda out, ckpt, extra: sample.main(["--ckpt", str(ckpt), "--prompt", "to", "--max-new-tokens", "3"]),
    ),
    "interp.plot_attention": (
        "ckpt",
        lambda out, ckpt, extra: plot_attention.main(
            ["--ckpt", str(ckpt), "--text", "to", "--out", str(out / "attn.html")]
        ),
    ),
}


# ----- faults ------------------------------------------------------------------------------------------------


def forge(path: Path, edit) -> None:
    """Edit a checkpoint and record the new content hash, as a deliberate forger would."""
    payload = torch.load(path, weights_only=True)
    edit(payload)
    payload[HASH_KEY] = content_hash(payload)
    torch.save(payload, path)


def unfinished(out: Path) -> Path:
    (out / RUN / "final.json").unlink()
    return out / RUN


def flip_bit(out: Path) -> None:
    path = out / RUN / "ckpt.pt"
    payload = torch.load(path, weights_only=True)
    w = (
        payload["weights"]["blocks.0.attn.W_Q"]
        if "blocks.0.attn.W_Q" in payload["weights"]
        else next(v for v in payload["weights"].values() if v.dim() >= 2)
    )
    raw = w.detach().numpy().tobytes()
    data = path.read_bytes()
    at = data.find(raw[:64])
    assert at >= 0, "tensor bytes not found in the archive"
    at += len(raw) // 2
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1 :])


def first_weight(p: dict) -> str:
    return next(k for k, v in p["weights"].items() if v.dim() >= 2)


def edit_config(out: Path) -> None:
    config = json.loads((out / RUN / "config.json").read_text())
    config["train"]["lr"] = 0.01
    (out / RUN / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def edit_meta(out: Path) -> None:
    config = json.loads((out / RUN / "config.json").read_text())
    config["meta"]["seed"] = 7
    (out / RUN / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def cut_metrics(out: Path) -> None:
    path = out / RUN / "metrics.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # the last line, half of it


def paste_old_record(out: Path) -> None:
    """An early record of the run pasted after its final evaluation (the last val_loss record stays last)."""
    path = out / RUN / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, next(line for line in lines if '"val_loss"' not in line)]) + "\n")


def edit_last_eval(out: Path, which: int = -1) -> str:
    lines = (out / RUN / "metrics.jsonl").read_text().splitlines()
    last = [i for i, line in enumerate(lines) if '"val_loss"' in line][which]
    record = json.loads(lines[last])
    record["val_loss"] = 0.1234
    lines[last] = json.dumps(record)
    return "\n".join(lines) + "\n"


def sigterm_at_step(monkeypatch, step: int = 3) -> None:
    import training.loop as loop_module

    seen = {"n": 0}

    def kill_point(phase):
        if phase == "step":
            seen["n"] += 1
            if seen["n"] == step:
                os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop_module, "kill_point", kill_point)


def sigterm_in_reader(monkeypatch) -> None:
    from interp.figures import plot_page
    from interp.model.gpt import ResidualGPT

    def term(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ResidualGPT, "generate", term)
    monkeypatch.setattr(plot_page, "save_html", term)


@dataclass
class Fault:
    name: str
    kinds: tuple[str, ...]  # the entry-point kinds it applies to
    prepare: object  # prepare(out, monkeypatch)
    match: str  # what the one stderr line says
    code: int = 2
    extra: list[str] = field(default_factory=list)  # more arguments for a "run" entry point


FAULTS = [
    Fault(
        "flipped bit in a weight",
        ("run", "ckpt"),
        lambda o, m: (unfinished(o), flip_bit(o)),
        r"ckpt\.pt is damaged: its content does not match the hash",
    ),
    Fault(
        "NaN weights",
        ("run", "ckpt"),
        lambda o, m: (
            unfinished(o),
            forge(o / RUN / "ckpt.pt", lambda p: p["weights"][first_weight(p)].fill_(float("nan"))),
        ),
        r"holds non-finite weights",
    ),
    Fault(
        "float16 weights",
        ("run",),
        lambda o, m: (
            unfinished(o),
            forge(o / RUN / "ckpt.pt", lambda p: p.update(weights={k: v.half() for k, v in p["weights"].items()})),
        ),
        r"is torch\.float16",
    ),
    Fault(
        "float step",
        ("run",),
        lambda o, m: (unfinished(o), forge(o / RUN / "ckpt.pt", lambda p: p.update(step=5.5))),
        r"step is not an integer \(5\.5\)",
    ),
    Fault(
        "step beyond max_steps",
        ("run",),
        lambda o, m: (unfinished(o), forge(o / RUN / "ckpt.pt", lambda p: p.update(step=10**9))),
        r"step 1000000000 is not an integer in \[0, max_steps=10\]",
    ),
    Fault(
        "best None",
        ("run",),
        lambda o, m: (unfinished(o), forge(o / RUN / "ckpt.pt", lambda p: p.update(best=None))),
        r"best is not a dict \(a NoneType\)",
    ),
    Fault(
        "totals empty",
        ("run",),
        lambda o, m: (unfinished(o), forge(o / RUN / "ckpt.pt", lambda p: p.update(totals={}))),
        r"totals\['train_time'\]",
    ),
    Fault(
        "mis-shaped Adam moment",
        ("run",),
        lambda o, m: (
            unfinished(o),
            forge(
                o / RUN / "ckpt.pt",
                lambda p: p["optimizer"]["state"][0].update(exp_avg=p["optimizer"]["state"][0]["exp_avg"][:1]),
            ),
        ),
        r"Adam's exp_avg",
    ),
    *[
        Fault(
            f"optimizer {key} forged",
            ("run",),
            lambda o, m, key=key, value=value: (
                unfinished(o),
                forge(o / RUN / "ckpt.pt", lambda p: [g.update({key: value}) for g in p["optimizer"]["param_groups"]]),
            ),
            rf"optimizer group 0's {key} is",
        )
        for key, value in [
            ("maximize", True),
            ("betas", (5.0, 0.95)),
            ("eps", -1.0),
            ("weight_decay", 0.5),
            ("amsgrad", True),
        ]
    ],
    Fault(
        "negative Adam second moment",
        ("run",),
        lambda o, m: (
            unfinished(o),
            forge(o / RUN / "ckpt.pt", lambda p: p["optimizer"]["state"][0]["exp_avg_sq"].fill_(-1.0)),
        ),
        r"exp_avg_sq of parameter 0 holds negative values",
    ),
    Fault(
        "Adam first moment past clipped gradients",
        ("run",),
        lambda o, m: (
            unfinished(o),
            forge(o / RUN / "ckpt.pt", lambda p: p["optimizer"]["state"][0]["exp_avg"].fill_(1e30)),
        ),
        r"exp_avg of parameter 0 reaches 1e\+30, past 1\.01",
    ),
    Fault(
        "a log edited between the checkpoint and the resume",
        ("run",),
        lambda o, m: (unfinished(o), (o / RUN / "metrics.jsonl").write_text(edit_last_eval(o, which=0))),
        r"metrics\.jsonl: its records before step \d+ are not the ones",
    ),
    Fault(
        "a log removed before the resume",
        ("run",),
        lambda o, m: (unfinished(o), (o / RUN / "probes.jsonl").unlink()),
        r"probes\.jsonl: its records before step \d+ are not the ones",
    ),
    Fault(
        "best forged in the checkpoint",
        ("run",),
        lambda o, m: (unfinished(o), forge(o / RUN / "ckpt.pt", lambda p: p["best"].update(val_loss=0.5))),
        r"best validation loss 0\.5 at step \d+ is not in",
    ),
    Fault(
        "a meta label edited in config.json between a kill and the resume",
        ("run",),
        lambda o, m: (unfinished(o), edit_meta(o)),
        r"config\.json: its meta labels \(seed\) were changed since the checkpoint was written",
    ),
    Fault("config.json missing", ("run",), lambda o, m: (o / RUN / "config.json").unlink(), r"but no config\.json"),
    Fault(
        "final.json without ckpt.pt",
        ("run",),
        lambda o, m: (o / RUN / "ckpt.pt").unlink(),
        r"final\.json but no ckpt\.pt",
    ),
    Fault(
        "config.json edited to the asked config",
        ("run",),
        lambda o, m: edit_config(o),
        r"not the finished run it claims to be.*train\.lr 0\.003 -> 0\.01",
        extra=["--set", "lr=0.01"],
    ),
    Fault(
        "bare NaN in final.json",
        ("run",),
        lambda o, m: (o / RUN / "final.json").write_text(
            (o / RUN / "final.json").read_text().replace('"best_step"', '"x": NaN, "best_step"')
        ),
        r"not valid JSON",
    ),
    Fault(
        "metrics.jsonl cut mid-line",
        ("run",),
        lambda o, m: cut_metrics(o),
        r"metrics\.jsonl.*(line \d+|does not end with the run's final evaluation|changed after the run finished)",
    ),
    Fault(
        "an early record pasted after the final evaluation",
        ("run",),
        lambda o, m: paste_old_record(o),
        r"metrics\.jsonl goes back in step",
    ),
    Fault(
        "last evaluation edited in metrics.jsonl",
        ("run",),
        lambda o, m: (o / RUN / "metrics.jsonl").write_text(edit_last_eval(o)),
        r"metrics\.jsonl changed after the run finished",
    ),
    Fault(
        "middle evaluation edited in metrics.jsonl",
        ("run",),
        lambda o, m: (o / RUN / "metrics.jsonl").write_text(edit_last_eval(o, which=0)),
        r"metrics\.jsonl changed after the run finished",
    ),
    Fault("non-finite lr", ("run",), lambda o, m: None, r"lr must be a finite number", extra=["--set", "lr=inf"]),
    Fault(
        "size that cannot fit",
        ("run",),
        lambda o, m: None,
        r"needs about .* GiB",
        extra=["--set", "d_model=4194304", "--set", "n_heads=1"],
    ),
    Fault(
        "SIGTERM while training",
        ("run",),
        lambda o, m: (shutil.rmtree(o / "smoke"), sigterm_at_step(m)),
        r"terminated \(SIGTERM\)|interrupted \(SIGTERM\)",
        code=143,
    ),
    Fault(
        "SIGTERM while reading a checkpoint",
        ("ckpt",),
        lambda o, m: sigterm_in_reader(m),
        r"interrupted \(SIGTERM\)",
        code=143,
    ),
]


def _pairs():
    pairs = []
    for fi, fault in enumerate(FAULTS):
        entries = [(ei, e) for ei, (e, (kind, _)) in enumerate(ENTRIES.items()) if kind in fault.kinds]
        for n, (ei, entry) in enumerate(entries):
            default = n == 0 or (fi + ei) % 3 == 0  # every fault, every entry point, a third of the pairs
            marks = () if default else (pytest.mark.slow,)
            pairs.append(pytest.param(fault, entry, id=f"{entry}-{fault.name.replace(' ', '_')}", marks=marks))
    return pairs


PAIRS = _pairs()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".lock")
    }


@pytest.mark.parametrize("fault,entry", PAIRS)
def test_fault_at_entry_point(fault, entry, fixture_dir, tmp_path, shared_data, capsys, monkeypatch):
    out = tmp_path / "o"
    shutil.copytree(fixture_dir, out)
    fault.prepare(out, monkeypatch)
    kind, call = ENTRIES[entry]
    before = snapshot(out)
    capsys.readouterr()
    rc = call(out, out / RUN / "ckpt.pt", fault.extra if kind == "run" else [])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == fault.code, err
    assert len(lines) == 1, err
    assert fault.code != 2 or lines[0].startswith("error: "), err
    assert re.search(fault.match, lines[0]), lines[0]
    after = snapshot(out)
    assert not [n for n, data in before.items() if after.get(n) != data], "an existing file changed"
    assert not list(out.rglob("*.tmp")), "a temporary file was left behind"
    assert not list(out.rglob(".lock.holder")), "the lock holder line was left behind"
    for path in out.rglob("*.json*"):  # strict JSON everywhere the project wrote
        if path.name != "final.json" or "NaN" not in fault.name:
            assert "NaN" not in path.read_text() and "Infinity" not in path.read_text(), path


def test_the_table_covers_every_fault_and_entry_point():
    default = [p for p in PAIRS if not p.marks]
    assert {p.values[0].name for p in default} == {f.name for f in FAULTS}
    assert {p.values[1] for p in default} == set(ENTRIES)
    assert len(PAIRS) >= 50
