"""Inputs refused before any work, with one `error:` line and exit 2, and nothing written (contract 7).

Neighbours of the hostile suite's classes on the newer entry points and options: an output that is the
input it is made from, repeated or empty lists, sizes that cannot fit, options whose value the command
would silently replace.
"""

from __future__ import annotations

import hashlib

import pytest

from interp.checkpoint import save_checkpoint
from interp.config import ModelConfig
from interp.model import ResidualGPT


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "ckpt.pt"
    model = ResidualGPT(ModelConfig(n_layers=1, n_heads=2, d_model=16, n_ctx=8, d_vocab=5))
    save_checkpoint(path, model, vocab=list("abcde"))
    return path


def _one_error(capsys, match):
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and match in err[0], err


@pytest.mark.parametrize("cli", ["nanogpt", "plot_attention"])
def test_an_output_that_is_the_input_checkpoint_is_refused(cli, ckpt, capsys):
    before = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    if cli == "nanogpt":
        from interp.nanogpt import main

        rc = main(["--ckpt", str(ckpt), "--out", str(ckpt)])
    else:
        from interp.plot_attention import main

        rc = main(["--ckpt", str(ckpt), "--text", "abc", "--out", str(ckpt.parent / "." / ckpt.name)])
    assert rc == 2
    _one_error(capsys, "is the --ckpt file it is made from")
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("args,match", [
    (["--variants", "full,full"], "more than once"),
    (["--variants", ""], "empty entry"),
    (["--set", "n_layers=1000000"], "GiB"),
])
def test_benchmark_options_are_checked_before_any_timing(args, match, capsys):
    from benchmarks.step import main

    assert main(["--shapes", "smoke", "--no-trainer", "--no-memory", *args]) == 2
    _one_error(capsys, match)


def test_phase_diagram_refuses_a_set_its_cells_override(tmp_path, capsys, data):
    from experiments.phase_diagram import EXPERIMENT

    rc = EXPERIMENT.main(["--preset", "smoke", "--axes", "n_layers=1", "--set", "n_layers=2", "--out", str(tmp_path)])
    assert rc == 2
    _one_error(capsys, "--axes n_layers=")
    assert not any(tmp_path.iterdir())


def test_interventions_refuse_more_validation_batches_than_the_preset_has(tmp_path, capsys, data):
    from experiments.interventions import EXPERIMENT

    assert EXPERIMENT.main(["--preset", "smoke", "--val-batches", "99999", "--out", str(tmp_path)]) == 2
    _one_error(capsys, "--val-batches 99999 is more than")
