"""interp.to_transformer_bridge on TransformerLens 3.x: 3.9 ships a TransformerBridge too, and it works."""

from __future__ import annotations

import pytest
import torch

from interp import ModelConfig, ResidualGPT
from interp.tl.major import TL_MAJOR

CHARS = list("abcdefghij\n")


@pytest.mark.skipif(TL_MAJOR >= 4, reason="the TL 4 bridge has test_bridge.py")
@pytest.mark.parametrize("mixer", ["attention", "position_blind"])
def test_to_transformer_bridge_is_exact_on_tl3(mixer):
    from interp.tl.bridge import to_transformer_bridge

    torch.manual_seed(0)
    model = ResidualGPT(
        ModelConfig(
            n_layers=2,
            d_model=32,
            n_heads=4,
            n_ctx=16,
            d_vocab=len(CHARS),
            residual="attn_only",
            mixer=mixer,
            init_std=0.2,
        )
    ).eval()
    b = to_transformer_bridge(model, vocab=CHARS)
    x = torch.randint(0, len(CHARS), (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, cache = b.run_with_cache(x)
        expected, ours = model.run_with_cache(x)
    shared = set(cache.keys()) & set(ours.keys())
    assert torch.equal(logits, expected) and len(shared) >= 30
    assert all(torch.equal(cache[k], ours[k]) for k in shared)
    prompt = torch.tensor([[CHARS.index(c) for c in "ab\n"]])
    text = b.generate("ab\n", max_new_tokens=4, do_sample=False, verbose=False)
    assert text == "".join(CHARS[i] for i in model.generate(prompt, 4, temperature=0.0)[0])
