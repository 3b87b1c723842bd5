"""Issue 46, wrong causes: a refusal names the cause it found - a cache from another model or another wiring, a
model.cfg edited after the model was built - not the most common cause (a hook on the stream, a mixer's tl_weights)."""

from __future__ import annotations

import pytest
import torch
from api_models import ids, refused, tiny_config, tiny_model
from majors import export, tl3_only

from interp import ResidualGPT
from interp.errors import CacheMismatchError, ConfigEditedError
from interp.reading.decompose import (
    DecompositionError,
    decompose,
    direct_logit_attribution,
    logit_lens,
    logit_lens_over,
)

HOOK_BLAMED = "a hook changed the residual stream"


def cache_of(model, **kwargs):
    return model.run_with_cache(ids(), **kwargs)[1]


@pytest.mark.parametrize("site", ["final", "blocks.1.hook_resid_mid", "blocks.1.hook_resid_pre"])
@pytest.mark.parametrize("wiring", ["attn_only", "ffn_only", "none"])
def test_a_cache_of_the_same_weights_under_another_wiring_is_named(wiring, site):
    full = tiny_model()
    twin = ResidualGPT(tiny_config(init_std=0.2, residual=wiring)).eval()
    twin.load_state_dict(full.state_dict())
    cache = dict(cache_of(twin).cache_dict)  # a plain dict: no model inside to compare with
    error = refused(CacheMismatchError, "cache", decompose, cache, site, full)
    assert "(residual='full')" in str(error) and repr(wiring) in str(error) and HOOK_BLAMED not in str(error)


def test_an_activation_cache_of_another_model_names_what_differs():
    cache = cache_of(tiny_model(residual="attn_only"))
    error = refused(CacheMismatchError, "cache", decompose, cache, "final", tiny_model())
    assert "residual 'attn_only' vs 'full'" in str(error)
    refused(CacheMismatchError, "cache", direct_logit_attribution, cache, 3, model=tiny_model())


@pytest.mark.parametrize(
    "other,words", [(dict(n_layers=3), "layers 0..2"), (dict(d_model=32), "d_model is 16")], ids=["layers", "width"]
)
def test_a_cache_of_other_sizes_names_them(other, words):
    cache = dict(cache_of(tiny_model(**other)).cache_dict)
    error = refused(CacheMismatchError, "cache", decompose, cache, "blocks.0.hook_resid_post", tiny_model())
    assert words in str(error)


@pytest.mark.parametrize("call", ["decompose per head", "direct_logit_attribution", "logit_lens"])
def test_a_cache_of_other_weights_of_the_same_shapes_is_named(call):
    """Per-head terms and attributions go through this model's W_O, ln_final and W_U: another model's cache would
    give numbers for neither model. Its hook_pos_embed is not this model's position embedding."""
    cache = dict(cache_of(tiny_model(seed=1)).cache_dict)
    model = tiny_model(seed=2)
    calls = {
        "decompose per head": lambda: decompose(cache, "final", model, per_head=True),
        "direct_logit_attribution": lambda: direct_logit_attribution(cache, 3, model=model),
        "logit_lens": lambda: logit_lens(cache, model),
    }
    assert "position embedding" in str(refused(CacheMismatchError, "cache", calls[call]))


def test_a_steering_hook_is_still_named_as_the_cause():
    model = tiny_model()
    vec = 3 * torch.randn(16, generator=torch.Generator().manual_seed(0))
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_pre", lambda x, hook: x + vec)]):
        cache = cache_of(model)
    with pytest.raises(DecompositionError, match=HOOK_BLAMED) as caught:
        decompose(cache, "final")
    assert not isinstance(caught.value, CacheMismatchError)


def test_an_export_cache_read_with_its_residual_gpt_is_its_own():
    model = tiny_model()
    tl = export(model)
    cache = tl.run_with_cache(ids())[1]
    parts = decompose(cache, "final", model)
    assert torch.allclose(parts.total(), cache["blocks.1.hook_resid_post"], atol=1e-5)


def edited(**changes):
    model = tiny_model()
    model.cfg = model.cfg.replace(**changes)
    return model


@pytest.mark.parametrize("changes", [dict(residual="attn_only"), dict(self_bias=4.0), dict(n_ctx=4)])
def test_an_edited_config_is_named_by_the_export_the_forward_and_decompose(changes):
    field = next(iter(changes))
    for call in (lambda m: export(m), lambda m: m(ids())):
        error = refused(ConfigEditedError, "model.cfg", call, edited(**changes))
        assert f"{field}: " in str(error) and "tl_weights" not in str(error)
    model = tiny_model()
    cache = cache_of(model)
    model.cfg = model.cfg.replace(**changes)
    refused(ConfigEditedError, "model.cfg", decompose, cache, "final")


def test_a_config_replaced_by_an_equal_one_is_not_an_edit():
    model = tiny_model()
    plain = model(ids())
    model.cfg = model.cfg.replace()
    assert torch.equal(model(ids()), plain)


# ----------------------------------------------------------------------------------------------------------
# The fresh audit (issue 46): what was handed, named


def test_a_resgpt_of_a_dict_names_cfg():
    from interp.errors import ArgumentError

    refused(ArgumentError, "cfg", ResidualGPT, tiny_config().to_dict())


@tl3_only
def test_a_checkpoint_of_an_export_is_refused_naming_save_hooked(tmp_path):
    from interp import save_checkpoint
    from interp.errors import CheckpointError

    error = refused(
        CheckpointError, "model", save_checkpoint, tmp_path / "x.pt", export(tiny_model(), vocab=list("abcdefghij"))
    )
    assert "save_hooked" in str(error) and not (tmp_path / "x.pt").exists()


def test_logit_lens_figure_names_one_record_handed_for_a_mapping_of_them():
    from interp.figures.plots import PlotInputError, logit_lens_figure

    record = logit_lens_over(tiny_model(), [ids()])
    refused(PlotInputError, "runs", logit_lens_figure, record)
    assert len(logit_lens_figure({"tiny": record}).data) == 1
