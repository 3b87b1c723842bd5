"""TransformerLens's Main Demo on an exported smoke model (full and attn_only), each number against ResidualGPT.

Adapted to a character model: prompts are strings of its characters, the answers its own top tokens. Runs on
the installed major: the 3.x export with from_pretrained's processing (make test), the 4.x bridge (make test-tl4).
"""

from __future__ import annotations

import pytest
import torch
from demo_models import WIRINGS, export_of, export_weights, model_of, prompts
from transformer_lens import SVDInterpreter

TOL = 1e-4


@pytest.fixture(scope="module", params=WIRINGS)
def pair(request):
    """(ResidualGPT, its export, prompts) for one wiring; the smoke run trains once per process."""
    model = model_of(request.param)
    return model, export_of(request.param), prompts(model)


def test_loss_and_string_input_are_resgpts(pair):
    model, tl, texts = pair
    tokens = tl.to_tokens(texts)
    with torch.no_grad():
        _, ours = model(tokens[:, :-1], tokens[:, 1:])
        theirs = tl(texts, return_type="loss")
        logits = tl(texts[0])
    assert abs(theirs.item() - ours.item()) < TOL
    # center_unembed (3.x) shifts each position's logits by a constant: log-probabilities are ResidualGPT's
    want = model(tokens[:1]).log_softmax(-1)
    assert (logits.log_softmax(-1) - want).abs().max().item() < TOL
    assert tl.to_string(tokens[0]) == texts[0] and tl.to_str_tokens(texts[0]) == list(texts[0])


def test_cached_attention_patterns_are_resgpts(pair):
    model, tl, texts = pair
    tokens = tl.to_tokens(texts)
    with torch.no_grad():
        _, ours = model.run_with_cache(tokens)
        _, cache = tl.run_with_cache(texts)
    for layer in range(model.cfg.n_layers):
        assert (cache["pattern", layer] - ours["pattern", layer]).abs().max().item() < 1e-5


def ablate_head(head: int):
    def hook(v, hook):  # the Main Demo's in-place ablation
        v[:, :, head] = 0.0

    return hook


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_in_place_head_ablation_as_on_the_export(pair, grad):
    """v[:, :, h] = 0.0 in a hook: the same loss on both, with autograd on too (backward runs on both)."""
    model, tl, texts = pair
    tokens = tl.to_tokens(texts)
    hooks = [("blocks.1.attn.hook_v", ablate_head(0))]
    with torch.set_grad_enabled(grad):
        ours = model.run_with_hooks(tokens[:, :-1], tokens[:, 1:], fwd_hooks=hooks)[1]
        theirs = tl.run_with_hooks(tokens, return_type="loss", fwd_hooks=hooks)
        clean = tl(tokens, return_type="loss")
    assert abs(ours.item() - theirs.item()) < TOL and abs(theirs.item() - clean.item()) > 1e-6
    if grad:
        ours.backward()
        theirs.backward()
        assert model.blocks[1].attn.in_proj.weight.grad is not None


def test_full_ov_circuit_eigenvalues(pair):
    """(W_E @ OV @ W_U).eigenvalues: W_E square with W_U (no untrained row), against ResidualGPT's weights."""
    model, tl, _ = pair
    circuit = tl.W_E @ tl.OV @ tl.W_U
    assert circuit.shape[-2:] == (model.cfg.d_vocab, model.cfg.d_vocab)
    eig = circuit.eigenvalues
    w = export_weights(model)
    left = w["W_E"] @ w["W_V"]  # [layer, head, vocab, d_head]
    right = w["W_O"] @ w["W_U"]  # [layer, head, d_head, vocab]
    want = torch.linalg.eigvals(right @ left)
    got_abs, want_abs = eig.abs().sort(-1).values, want.abs().sort(-1).values
    assert torch.allclose(got_abs, want_abs, rtol=1e-3, atol=1e-3 * want_abs.max().item())
    assert torch.allclose(eig.real.sum(-1), want.real.sum(-1), rtol=1e-3, atol=1e-3 * want_abs.max().item())


def test_svd_interpreter_ov_singular_vectors(pair):
    model, tl, _ = pair
    vectors = SVDInterpreter(tl).get_singular_vectors("OV", layer_index=1, head_index=0, num_vectors=3)
    assert vectors.shape == (model.cfg.d_vocab, 1, 3)
    w = export_weights(model)
    ov = w["W_V"][1, 0] @ w["W_O"][1, 0]
    _, s, vh = torch.linalg.svd(ov)
    assert bool((s[:3] - s[1:4]).abs().min() > 1e-4 * s[0])  # distinct: each vector defined up to sign
    for i in range(3):
        want, got = vh[i] @ w["W_U"], vectors[:, 0, i]
        cos = torch.nn.functional.cosine_similarity(want, got, dim=0).abs().item()
        assert cos > 1 - 1e-4 and abs(got.norm().item() - want.norm().item()) < 1e-3 * want.norm().item()


def test_generate_greedy_is_resgpts(pair):
    model, tl, texts = pair
    out = tl.generate(texts[0], max_new_tokens=8, do_sample=False, verbose=False)
    want = model.generate(tl.to_tokens(texts[0]), max_new_tokens=8, temperature=0)
    assert out == tl.to_string(want[0])
