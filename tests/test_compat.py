"""What scripts and callbacks lean on: a RunDir reads as a path, make_mixer, warnings that follow the filters."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from interp.config.model_config import ModelConfig


def test_run_dir_still_reads_as_a_path(tmp_path):
    from training.rundir import RunDir

    run_dir = RunDir(tmp_path / "run")
    assert run_dir / "x.json" == tmp_path / "run" / "x.json" and isinstance(run_dir / "x.json", Path)
    assert os.fspath(run_dir) == str(tmp_path / "run") and Path(run_dir) == run_dir.path
    run_dir.path.mkdir()
    (run_dir / "note.txt").write_text("kept")
    assert os.path.exists(os.path.join(run_dir, "note.txt"))


def test_make_mixer_builds_the_registered_mixer():
    from interp.model.mixers import CausalAttention, UniformMixer, make_mixer

    cfg = ModelConfig(n_layers=1, d_model=8, n_heads=2, n_ctx=4, d_vocab=5)
    assert type(make_mixer(cfg)) is CausalAttention
    mixer = make_mixer(ModelConfig(n_layers=1, d_model=8, n_heads=2, n_ctx=4, d_vocab=5, mixer="uniform"))
    assert type(mixer) is UniformMixer and mixer(torch.zeros(1, 4, 8)).shape == (1, 4, 8)


def test_toolkit_warnings_follow_the_users_filters():
    from interp import to_hooked_transformer
    from interp.model.gpt import ResidualGPT
    from interp.tl.hooked import NonAdditiveResidualWarning

    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=5, residual="attn_only"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, cache = to_hooked_transformer(model.eval(), vocab=list("abcde")).run_with_cache(torch.zeros(1, 8).long())
    # at every call (a loop over layers shows each), unless the user's filter says once or ignore
    for action, expected in (("once", 1), ("default", 3), ("module", 3), ("always", 3), ("ignore", 0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action, NonAdditiveResidualWarning)
            for _ in range(3):
                cache.decompose_resid()  # one line, three calls
        ours = [w for w in caught if issubclass(w.category, NonAdditiveResidualWarning)]
        assert len(ours) == expected, action
        assert all(w.filename == __file__ for w in ours)  # attributed to the caller's line
