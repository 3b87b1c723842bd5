"""TransformerLens's Head Detector Demo (transformer_lens.head_detector.detect_head) on an exported smoke model
(full and attn_only): every head's score against the same score of ResidualGPT's own attention patterns."""

from __future__ import annotations

import pytest
import torch
from demo_models import WIRINGS, export_of, model_of, prompts
from transformer_lens.head_detector import compute_head_attention_similarity_score, detect_head


@pytest.fixture(scope="module", params=WIRINGS)
def pair(request):
    return model_of(request.param), export_of(request.param)


def scores_on_resgpt(model, tokens, pattern, **options):
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    out = torch.empty(model.cfg.n_layers, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            out[layer, head] = compute_head_attention_similarity_score(
                cache["pattern", layer][0, head], detection_pattern=pattern, **options
            )
    return out


@pytest.mark.parametrize("kind", ["previous_token_head", "duplicate_token_head", "induction_head"])
def test_named_heads(pair, kind):
    from transformer_lens import head_detector

    model, tl = pair
    text = prompts(model, n=1, length=10)[0] * 2  # repeated: duplicate and induction heads have targets
    tokens = tl.to_tokens(text)
    got = detect_head(tl, text, kind)
    pattern = getattr(head_detector, f"get_{kind}_detection_pattern")(tokens.cpu())
    want = scores_on_resgpt(model, tokens, pattern, exclude_bos=False, exclude_current_token=False, error_measure="mul")
    assert got.shape == (model.cfg.n_layers, model.cfg.n_heads)
    assert (got - want).abs().max().item() < 1e-5


def test_a_custom_pattern_and_absolute_error(pair):
    model, tl = pair
    text = prompts(model, n=1, length=16, seed=3)[0]
    tokens = tl.to_tokens(text)
    n = tokens.shape[1]
    pattern = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]  # a uniform head
    got = detect_head(tl, text, pattern, error_measure="abs", exclude_bos=True)
    want = scores_on_resgpt(model, tokens, pattern, exclude_bos=True, exclude_current_token=False, error_measure="abs")
    assert (got - want).abs().max().item() < 1e-5
