"""TransformerLens's Activation Patching Demo (transformer_lens.patching) on an exported smoke model (full and
attn_only): every patched metric against the same patch made by hand on ResidualGPT itself."""

from __future__ import annotations

import pytest
import torch
from demo_models import WIRINGS, patching_setup
from transformer_lens import patching

TOL = 1e-4


@pytest.fixture(scope="module", params=WIRINGS)
def setup(request):
    model, tl, clean, corrupted, metric = patching_setup(request.param)
    with torch.no_grad():
        _, clean_cache = tl.run_with_cache(clean)
        _, ours = model.run_with_cache(clean)
    return model, tl, clean, corrupted, metric, clean_cache, ours


def patched_on_resgpt(model, corrupted, name, value, index, metric):
    def hook(x, hook):
        x = x.clone()
        x[index] = value[index]
        return x

    with torch.no_grad():
        return metric(model.run_with_hooks(corrupted, fwd_hooks=[(name, hook)])).item()


def test_resid_pre_patching(setup):
    model, tl, clean, corrupted, metric, clean_cache, ours = setup
    got = patching.get_act_patch_resid_pre(tl, corrupted, clean_cache, metric)
    n_layers, n_pos = model.cfg.n_layers, clean.shape[1]
    assert got.shape == (n_layers, n_pos)
    for layer in range(n_layers):
        for pos in (0, n_pos // 2, n_pos - 1):
            name = f"blocks.{layer}.hook_resid_pre"
            want = patched_on_resgpt(model, corrupted, name, ours[name], (slice(None), pos), metric)
            assert abs(got[layer, pos].item() - want) < TOL
    with torch.no_grad():  # the metric on the export's own logits is ResidualGPT's (center_unembed aside)
        assert abs(metric(model(clean)).item() - metric(tl(clean)).item()) < TOL


def test_head_output_patching_by_position(setup):
    model, tl, clean, corrupted, metric, clean_cache, ours = setup
    got = patching.get_act_patch_attn_head_out_by_pos(tl, corrupted, clean_cache, metric)
    n_pos = clean.shape[1]
    assert got.shape == (model.cfg.n_layers, n_pos, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            pos = n_pos - 1
            name = f"blocks.{layer}.attn.hook_z"
            want = patched_on_resgpt(model, corrupted, name, ours[name], (slice(None), pos, head), metric)
            assert abs(got[layer, pos, head].item() - want) < TOL


def test_patching_the_whole_residual_stream_recovers_the_clean_metric(setup):
    model, tl, clean, corrupted, metric, clean_cache, ours = setup
    got = patching.get_act_patch_resid_pre(tl, corrupted, clean_cache, metric)
    name = "blocks.0.hook_resid_pre"
    whole = patched_on_resgpt(model, corrupted, name, ours[name], (slice(None),), metric)
    with torch.no_grad():
        assert abs(whole - metric(model(clean)).item()) < TOL
        corrupted_metric = metric(model(corrupted)).item()
    assert got.shape[0] == model.cfg.n_layers and abs(whole - corrupted_metric) > 1e-4
