"""Checkpoints are data: atomic, versioned, loaded with weights_only, unsafe pickles refused."""

import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO

from interp import CheckpointError, ModelConfig, ResidualGPT, load_checkpoint, save_checkpoint
from interp.files.io import DataFileError


def small():
    return ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=7, residual="attn_only"))


def test_round_trip_with_training_state(tmp_path):
    model = small()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 8, dtype=torch.long)).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, step=3, optimizer=opt.state_dict(), rng=torch.get_rng_state(), vocab=list("abcdefg"))
    ckpt = load_checkpoint(path)
    assert ckpt.config == model.cfg
    assert ckpt.state["step"] == 3 and ckpt.state["vocab"] == list("abcdefg")
    assert set(ckpt.state["optimizer"]) == {"state", "param_groups"}
    loaded = ResidualGPT.from_checkpoint(path)
    t = torch.randint(0, 7, (2, 8))
    assert torch.equal(loaded(t), model(t))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temp file left behind


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope.pt")


def test_truncated_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, small())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)


def test_unknown_schema(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"schema": "residual-gpt/99", "model_config": {}, "weights": {}}, path)
    with pytest.raises(CheckpointError, match="schema 'residual-gpt/99'"):
        load_checkpoint(path)


def test_plain_tensor_file_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.zeros(3), path)
    with pytest.raises(CheckpointError, match="not a ResidualGPT checkpoint"):
        load_checkpoint(path)


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_code_running_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    exploit = _Exploit()
    exploit.marker = marker
    path = tmp_path / "evil.pt"
    torch.save({"schema": "residual-gpt/1", "payload": exploit}, path)
    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump(exploit, f)
    for p in (path, tmp_path / "evil.pkl"):
        with pytest.raises(CheckpointError, match="not a plain-data checkpoint"):
            load_checkpoint(p)
    assert not marker.exists()


def half_then(monkeypatch, action):
    """torch.save that writes the first half of the real bytes to its target, then calls action()."""
    real_save = torch.save

    def half_save(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        with open(f, "wb") as out:
            out.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            out.flush()
            os.fsync(out.fileno())
        action()

    monkeypatch.setattr(torch, "save", half_save)


def test_error_after_half_the_bytes_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, small(), step=1)

    def disk_full():
        raise OSError(28, "No space left on device")

    half_then(monkeypatch, disk_full)
    with pytest.raises(DataFileError, match="No space left"):
        save_checkpoint(path, small(), step=2)
    assert load_checkpoint(path).state["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # the half-written temporary is removed


SAVE_THEN_KILL = textwrap.dedent(
    """
    import io, os, signal, sys
    import torch
    from interp import ModelConfig, ResidualGPT, save_checkpoint

    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=7))
    save_checkpoint(sys.argv[1], model, step=1)
    real_save = torch.save

    def half_then_kill(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer)
        with open(f, "wb") as out:
            out.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            out.flush()
            os.fsync(out.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    torch.save = half_then_kill
    save_checkpoint(sys.argv[1], model, step=2)
    """
)


def test_sigkill_in_the_middle_of_a_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", SAVE_THEN_KILL, str(path)], env=env, cwd=REPO)
    assert killed.returncode == -signal.SIGKILL
    assert load_checkpoint(path).state["step"] == 1
    # nothing ran to clean up: the half-written temporary stays beside it, under a name nothing loads
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ckpt.pt"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".ckpt.pt.") and leftovers[0].endswith(".tmp")
