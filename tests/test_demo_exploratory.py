"""TransformerLens's Exploratory Analysis Demo on an exported smoke model (full and attn_only): the logit
difference through apply_ln_to_stack and tokens_to_residual_directions, the logit lens (accumulated_resid),
decompose_resid, per-head attribution, each against ResidualGPT's own logits.

On TL 3 the export folds its LayerNorms (from_pretrained's default), so the recipe is exact; on TL 4 the
bridge cannot fold, so each of those calls warns (UnfoldedLayerNormWarning, at every call, in a loop too)
and interp.reading.decompose gives the number instead.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from demo_models import WIRINGS, answers, export_of, logit_diff, model_of, prompts
from majors import TL4

from interp import ToolkitError
from interp.errors import UnfoldedLayerNormWarning
from interp.reading.decompose import direct_logit_attribution

TOL = 1e-4


@pytest.fixture(scope="module", params=WIRINGS)
def run(request):
    """(residual, ResidualGPT, export, tokens, answer pairs, true logit differences, export cache)."""
    model = model_of(request.param)
    tl = export_of(request.param)
    tokens = tl.to_tokens(prompts(model))
    pairs = answers(model, tokens)
    with torch.no_grad():
        true = logit_diff(model(tokens), pairs)
        _, cache = tl.run_with_cache(tokens)
    return request.param, model, tl, tokens, pairs, true, cache


def recipe(tl, cache, pairs):
    """The demo's residual_stack_to_logit_diff on the final stream."""
    dirs = tl.tokens_to_residual_directions(pairs)
    scaled = cache.apply_ln_to_stack(cache["resid_post", -1][:, -1], layer=-1, pos_slice=-1)
    return (scaled * (dirs[:, 0] - dirs[:, 1])).sum(-1)


def caught(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # Python's own: once per line, unless the toolkit warns each call
        out = [fn() for _ in range(3)]  # a loop: one line, three calls
    return out, [w for w in seen if issubclass(w.category, UnfoldedLayerNormWarning)]


def test_logit_difference_recipe(run):
    _, model, tl, tokens, pairs, true, cache = run
    with torch.no_grad():
        export_diff = logit_diff(tl(tokens), pairs)
        values, seen = caught(lambda: recipe(tl, cache, pairs))
    assert (export_diff - true).abs().max().item() < TOL  # center_unembed leaves differences as they are
    if TL4:  # unfolded: not the logit difference, and said at every call of both methods
        assert len(seen) == 6 and all("ln_final" in str(w.message) for w in seen)
        assert (values[0] - true).abs().max().item() > 1e-3
    else:
        assert not seen and (values[0] - true).abs().max().item() < TOL


def test_logit_lens_through_accumulated_resid(run):
    residual, model, tl, tokens, pairs, true, cache = run
    with torch.no_grad():
        dirs = tl.tokens_to_residual_directions(pairs)

        def lens():
            acc, labels = cache.accumulated_resid(
                layer=-1, incl_mid=True, pos_slice=-1, apply_ln=True, return_labels=True
            )
            return (acc * (dirs[:, 0] - dirs[:, 1])).sum(-1), labels

        out, seen = caught(lens)
    per_layer, labels = out[0]
    assert labels[-1] == "final_post" and per_layer.shape == (len(labels), len(tokens))
    # up to the unembedding TL applies ln_final itself (recompute_ln), weight included: exact, folded or not
    assert not seen and (per_layer[-1] - true).abs().max().item() < TOL


def test_decompose_resid_sums_to_the_stream_or_says_why_not(run):
    residual, model, tl, tokens, pairs, true, cache = run
    final = cache["resid_post", -1][:, -1]
    if residual == "full":
        parts = cache.decompose_resid(layer=-1, pos_slice=-1)
        assert (parts.sum(0) - final).abs().max().item() < 1e-4
    elif TL4:
        with pytest.raises(ToolkitError, match="decompose_resid assumes"):
            cache.decompose_resid(layer=-1, pos_slice=-1)
    else:
        from interp.tl.hooked import NonAdditiveResidualWarning

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            for _ in range(3):
                parts = cache.decompose_resid(layer=-1, pos_slice=-1)
        assert sum(issubclass(w.category, NonAdditiveResidualWarning) for w in seen) == 3
        assert (parts.sum(0) - final).abs().max().item() > 1e-2  # the sum it warned about is indeed wrong


def test_exact_attribution_through_interp_decompose(run):
    """interp.reading.decompose's direct logit attribution sums to the true logit difference on every wiring/major."""
    residual, model, tl, tokens, pairs, true, cache = run
    batch, pos = tokens.shape
    right, wrong = (pairs[:, i : i + 1].expand(batch, pos) for i in (0, 1))
    attribution = direct_logit_attribution(cache, right, wrong)
    got = attribution.total()[:, -1]
    assert (attribution.target[:, -1] - true).abs().max().item() < TOL
    assert (got - true).abs().max().item() < TOL


def test_per_head_attribution_on_full(run):
    residual, model, tl, tokens, pairs, true, cache = run
    if residual != "full":
        pytest.skip("per-head sums are the additive stream's: full only (the others warn or refuse above)")
    dirs = tl.tokens_to_residual_directions(pairs) if not TL4 else None
    if TL4:
        pytest.skip("the bridge's apply_ln=True is unfolded (warned above)")
    heads, labels = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True, return_labels=True)
    per_head = (heads * (dirs[:, 0] - dirs[:, 1])).sum(-1)
    rest = cache.decompose_resid(layer=-1, pos_slice=-1, apply_ln=True, mode="mlp", incl_embeds=True)
    others = (rest * (dirs[:, 0] - dirs[:, 1])).sum(-1).sum(0)
    b_o = sum(tl.blocks[layer].attn.b_O for layer in range(model.cfg.n_layers))
    b_o_part = cache.apply_ln_to_stack(b_o.expand_as(cache["resid_post", -1][:, -1])[None], layer=-1, pos_slice=-1)
    total = per_head.sum(0) + others + (b_o_part[0] * (dirs[:, 0] - dirs[:, 1])).sum(-1)
    assert len(labels) == model.cfg.n_layers * model.cfg.n_heads
    assert (total - true).abs().max().item() < 1e-3
