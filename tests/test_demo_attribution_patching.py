"""TransformerLens's Attribution Patching Demo on an exported smoke model (full and attn_only): caches built by
hand (ActivationCache(store, model)) from forward and backward hooks, attributions against ResidualGPT's own.

The attribution of the residual stream ((clean - corrupted) . gradient) is ResidualGPT's on the export too:
every read of the stream is a LayerNorm, so the gradient has no component along the mean the export's
centring removes. decompose_resid on a hand-built cache warns (TL 3) or refuses (TL 4) at every call where a
residual path is removed, as on the model's own cache.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from demo_models import WIRINGS, patching_setup
from majors import TL4
from transformer_lens import ActivationCache

from interp import ToolkitError

TOL = 1e-4


def not_qkv_input(name: str) -> bool:
    """The demo's filter; hook_attn_in / hook_mlp_in left out too (the demo turns them on; nothing here reads them)."""
    return "_input" not in name and not name.endswith(("hook_attn_in", "hook_mlp_in"))


def cache_fwd_and_bwd(model, tokens, metric):
    """The demo's get_cache_fwd_and_bwd: every activation and its gradient, as hand-built caches."""
    model.reset_hooks()
    store, grads = {}, {}

    def fwd(act, hook):
        store[hook.name] = act.detach()

    def bwd(act, hook):
        grads[hook.name] = act.detach()

    model.add_hook(not_qkv_input, fwd, "fwd")
    model.add_hook(not_qkv_input, bwd, "bwd")
    try:
        value = metric(model(tokens))
        value.backward()
    finally:
        model.reset_hooks()
    return value.item(), ActivationCache(store, model), ActivationCache(grads, model)


@pytest.fixture(scope="module", params=WIRINGS)
def setup(request):
    model, tl, clean, corrupted, metric = patching_setup(request.param)
    tl.set_use_attn_result(True)  # as the demo does: hook_result holds each head's output
    runs = {}
    for name, m in (("model", model), ("export", tl)):
        clean_value, clean_cache, _ = cache_fwd_and_bwd(m, clean, metric)
        corrupted_value, corrupted_cache, grads = cache_fwd_and_bwd(m, corrupted, metric)
        runs[name] = (clean_value, corrupted_value, clean_cache, corrupted_cache, grads)
    tl.set_use_attn_result(False)
    return request.param, model, tl, runs


def resid_attribution(clean_cache, corrupted_cache, grads, n_layers):
    """[layer, batch, pos]: (clean - corrupted) . gradient at every resid_pre."""
    out = []
    for layer in range(n_layers):
        name = f"blocks.{layer}.hook_resid_pre"
        out.append(((clean_cache[name] - corrupted_cache[name]) * grads[name]).sum(-1))
    return torch.stack(out)


def test_metric_values_are_resgpts(setup):
    _, model, tl, runs = setup
    for a, b in zip(runs["model"][:2], runs["export"][:2], strict=True):
        assert abs(a - b) < TOL


def test_residual_attribution_is_resgpts(setup):
    _, model, tl, runs = setup
    want = resid_attribution(*runs["model"][2:], model.cfg.n_layers)
    got = resid_attribution(*runs["export"][2:], model.cfg.n_layers)
    assert want.abs().max().item() > 1e-3  # something to attribute
    assert (got - want).abs().max().item() < TOL * max(1.0, want.abs().max().item())


def test_head_attribution_through_hook_z_is_resgpts(setup):
    _, model, tl, runs = setup
    for layer in range(model.cfg.n_layers):
        name = f"blocks.{layer}.attn.hook_z"
        per = {}
        for key in ("model", "export"):
            _, _, clean_cache, corrupted_cache, grads = runs[key]
            per[key] = ((clean_cache[name] - corrupted_cache[name]) * grads[name]).sum(-1)
        assert (per["export"] - per["model"]).abs().max().item() < TOL


def test_decompose_resid_on_a_hand_built_cache(setup):
    residual, model, tl, runs = setup
    clean_cache = runs["export"][2]
    final = clean_cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]
    if residual == "full":
        parts = clean_cache.decompose_resid(layer=-1)
        assert (parts.sum(0) - final).abs().max().item() < 1e-4
    elif TL4:
        for _ in range(2):  # at every call
            with pytest.raises(ToolkitError, match="decompose_resid assumes"):
                clean_cache.decompose_resid(layer=-1)
    else:
        from interp.tl.hooked import NonAdditiveResidualWarning

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            for _ in range(3):
                parts = clean_cache.decompose_resid(layer=-1)
        assert sum(issubclass(w.category, NonAdditiveResidualWarning) for w in seen) == 3
        assert (parts.sum(0) - final).abs().max().item() > 1e-2
