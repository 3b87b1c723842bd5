"""interp.reading.decompose: exact decompositions, direct logit attribution and the logit lens for every wiring."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from majors import TL4, tl3_only
from majors import export as load_tl

from interp import ModelConfig, ResidualGPT, ToolkitError
from interp.reading.decompose import (
    DecompositionError,
    decompose,
    decomposition_error,
    direct_logit_attribution,
    lens_labels,
    logit_lens,
    logit_lens_ce,
    logit_lens_over,
    resid_sites,
)

RESIDUALS = ("full", "attn_only", "ffn_only", "none")
MIXERS = {"attention": 0.0, "self_bias": 4.0, "no_self": -math.inf, "uniform": 0.0, "position_blind": 0.0}
TOL = 1e-5
VOCAB = [chr(ord("A") + i) for i in range(20)]


def model_for(residual: str, mixer: str, bias: bool = True) -> ResidualGPT:
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layers=3,
        d_model=32,
        n_heads=4,
        n_ctx=12,
        d_vocab=len(VOCAB),
        residual=residual,
        bias=bias,
        mixer="attention" if mixer in ("self_bias", "no_self") else mixer,
        self_bias=MIXERS[mixer],
        init_std=0.2,
        runtime_gain=1.5,
    )
    model = ResidualGPT(cfg).eval()
    with torch.no_grad():  # a trained LayerNorm is not the identity
        model.ln_final.w.uniform_(0.5, 2.0)
        if bias:
            model.ln_final.b.normal_(0, 0.3)
    return model


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, len(VOCAB), (3, 12), generator=torch.Generator().manual_seed(seed))


def export(model: ResidualGPT, **kwargs):
    """The installed major's TransformerLens model (TL 4's bridge takes no weight processing)."""
    return load_tl(model, vocab=VOCAB, **kwargs)


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_decomposition_sums_to_the_cached_stream(residual, mixer):
    model = model_for(residual, mixer)
    _, cache = model.run_with_cache(tokens())
    errors = [decomposition_error(cache, s, model, per_head=h) for s in resid_sites(3) for h in (False, True)]
    print(f"{residual} {mixer}: largest |sum - stream| = {max(errors):.2e}")
    assert max(errors) < TOL


@pytest.mark.parametrize("residual", RESIDUALS)
def test_decomposition_keeps_only_the_terms_that_reach_the_site(residual):
    labels = decompose(
        model_for(residual, "attention").run_with_cache(tokens())[1], "final", model_for(residual, "attention")
    ).labels
    expected = {
        "full": ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out", "2_attn_out", "2_mlp_out"],
        "attn_only": ["2_mlp_out"],
        "ffn_only": ["2_attn_out", "2_mlp_out"],
        "none": ["2_mlp_out"],
    }[residual]
    assert labels == expected


@pytest.mark.parametrize("fold", [False, pytest.param(True, marks=tl3_only)])
@pytest.mark.parametrize("mixer", ["attention", "no_self", "uniform"] + (["position_blind"] if TL4 else []))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_exported_cache_decomposes_and_attributes_exactly(residual, mixer, fold):
    model = model_for(residual, mixer)
    tl = export(model, **(dict(fold_ln=True, center_writing_weights=True, center_unembed=True) if fold else {}))
    x = tokens()
    logits, cache = tl.run_with_cache(x)  # an ActivationCache: it carries its model
    errors = [decomposition_error(cache, s, per_head=h) for s in resid_sites(3) for h in (False, True)]
    assert max(errors) < TOL
    correct, wrong = x.roll(-1, dims=1), (x + 7) % len(VOCAB)
    attribution = direct_logit_attribution(cache, correct, wrong, per_head=True)
    true = logits.gather(-1, correct[..., None])[..., 0] - logits.gather(-1, wrong[..., None])[..., 0]
    assert (attribution.total() - true).abs().max() < 1e-4


@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_direct_logit_attribution_sums_to_the_logit_difference(residual, mixer):
    model = model_for(residual, mixer)
    x = tokens()
    logits, cache = model.run_with_cache(x)
    correct, wrong = x.roll(-1, dims=1), (x + 3) % len(VOCAB)
    true = logits.gather(-1, correct[..., None])[..., 0] - logits.gather(-1, wrong[..., None])[..., 0]
    for per_head in (False, True):
        attribution = direct_logit_attribution(cache, correct, wrong, model, per_head=per_head)
        assert attribution.values.shape == (len(attribution.labels), *x.shape)
        assert (attribution.total() - true).abs().max() < 1e-4
        assert (attribution.target - true).abs().max() < 1e-4
    single = direct_logit_attribution(cache, 5, model=model)  # one token everywhere: its logit
    assert (single.total() - logits[..., 5]).abs().max() < 1e-4


def test_tl_decompose_resid_is_wrong_for_attn_only_and_ours_is_not():
    model = model_for("attn_only", "attention", bias=False)
    _, cache = export(model).run_with_cache(tokens())
    final = cache["blocks.2.hook_resid_post"]
    if TL4:  # the bridge's cache refuses rather than warns
        with pytest.raises(ToolkitError, match="interp.reading.decompose"):
            cache.decompose_resid()
        tl_sum = torch.stack(
            [cache["hook_embed"], cache["hook_pos_embed"]]
            + [cache[f"blocks.{l}.hook_{s}_out"] for l in range(3) for s in ("attn", "mlp")]
        ).sum(0)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tl_sum = cache.decompose_resid().sum(0)
    assert (tl_sum - final).abs().max() > 0.1  # what the warning is about
    assert (decompose(cache, "final").total() - final).abs().max() < TOL


@pytest.mark.parametrize("residual", RESIDUALS)
def test_logit_lens_last_site_is_the_model_loss(residual):
    model = model_for(residual, "attention")
    x = tokens()
    y = tokens(2)
    logits, cache = model.run_with_cache(x)
    lens = logit_lens_ce(cache, y, model)
    assert lens["sites"][0] == "blocks.0.hook_resid_pre" and len(lens["ce"]) == 4
    assert lens["ce"][-1] == pytest.approx(float(F.cross_entropy(logits.flatten(0, 1), y.flatten())), abs=1e-5)
    over = logit_lens_over(model, [(x, y), (x, y)])
    assert over["layers"] == ["embed", "0", "1", "2"]
    assert over["ce"] == pytest.approx(lens["ce"], abs=1e-5)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_logit_lens_sites_carry_transformer_lens_accumulated_resid_labels(residual):
    """lens_labels names each logit-lens site as TL's accumulated_resid does (0_pre, 1_pre, 2_pre, final_post),
    and the tensors under the two names are the same, in the same order (issue 58: they were matched by position)."""
    model = model_for(residual, "attention", bias=False)
    _, cache = model.run_with_cache(tokens())
    stack, tl_labels = cache.accumulated_resid(return_labels=True)
    sites, _ = logit_lens(cache, model)
    assert [lens_labels(3)[s] for s in sites] == tl_labels == ["0_pre", "1_pre", "2_pre", "final_post"]
    assert all(torch.equal(cache[s], stack[i]) for i, s in enumerate(sites))


@tl3_only
def test_logit_lens_on_the_export_is_transformer_lens_logit_lens_under_its_labels():
    """On the export with its defaults, TL's own logit lens (accumulated_resid(apply_ln=True) @ W_U + b_U) gives the
    toolkit's log-probs under the label lens_labels names (log-probs: center_unembed shifts each logit row)."""
    tl = export(
        model_for("attn_only", "attention", bias=False), fold_ln=True, center_writing_weights=True, center_unembed=True
    )
    _, cache = tl.run_with_cache(tokens())
    stack, tl_labels = cache.accumulated_resid(apply_ln=True, return_labels=True)
    sites, logits = logit_lens(cache)
    theirs = dict(zip(tl_labels, (stack @ tl.W_U + tl.b_U).log_softmax(-1), strict=True))
    for site, ours in zip(sites, logits.log_softmax(-1), strict=True):
        torch.testing.assert_close(ours, theirs[lens_labels(3)[site]], rtol=0, atol=1e-5)  # float32 log-probs


@tl3_only
def test_additive_tl_methods_warn_on_ablated_exports():
    import interp.tl.hooked as hooked
    from interp.tl.stream_reads import ADDITIVE_METHODS

    full = export(model_for("full", "attention"))
    ablated = export(model_for("ffn_only", "attention"))
    assert not isinstance(full, hooked.NonAdditiveHookedTransformer)
    _, full_cache = full.run_with_cache(tokens())
    _, cache = ablated.run_with_cache(tokens())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every call's warning shows (Python's filters decide how often)
        full_cache.decompose_resid()
        cache.accumulated_resid(apply_ln=True)  # right for every wiring: no warning
        for _ in range(2):
            stack = cache.decompose_resid(pos_slice=-1)
        cache.logit_attrs(stack, tokens=torch.zeros(3, dtype=torch.long), pos_slice=-1)
        cache.stack_head_results()
        cache.get_full_resid_decomposition(expand_neurons=False)  # one warning, not one per nested call
        cache.apply_slice_to_batch_dim(slice(0, 1)).decompose_resid()
    ours = [w for w in caught if issubclass(w.category, hooked.NonAdditiveResidualWarning)]
    methods = [m for w in ours for m in ADDITIVE_METHODS if f"ActivationCache.{m}" in str(w.message)]
    assert methods == [
        "decompose_resid",
        "decompose_resid",
        "logit_attrs",
        "stack_head_results",
        "get_full_resid_decomposition",
        "decompose_resid",
    ]
    assert all("interp.reading.decompose" in str(w.message) and "ffn_only" in str(w.message) for w in ours)


def test_bad_site_and_missing_model_are_refused():
    model = model_for("full", "attention")
    _, cache = model.run_with_cache(tokens())
    with pytest.raises(DecompositionError, match="unknown residual site"):
        decompose(cache, "blocks.9.hook_resid_post", model)
    with pytest.raises(DecompositionError, match="pass model="):
        decompose(dict(cache.cache_dict), "final")  # a plain dict does not know its model
    assert decompose(cache, "final").labels == decompose(cache, "final", model).labels  # an ActivationCache does
    with pytest.raises(DecompositionError, match="holds no"):
        decompose({}, "final", model)
