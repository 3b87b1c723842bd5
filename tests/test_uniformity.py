"""probes.uniformity: the token-uniformity measures against hand computations on constructed streams, and the
probe live, post hoc and on the TransformerLens export."""

import math

import pytest
import torch
from majors import TL4

from interp.config.model_config import ModelConfig
from interp.errors import ShapeError, TokenIdError, ToolkitError
from interp.model.gpt import ResidualGPT
from probes.uniformity import UniformityProbe, qk_grads, stream_uniformity, token_uniformity


def test_a_rank_one_stream_is_uniform():
    v = torch.randn(5)
    x = v.expand(3, 7, 5).clone()  # every position the same vector
    m = stream_uniformity(x)
    assert m["residual"].abs().max() < 1e-12
    torch.testing.assert_close(m["cosine"], torch.ones(3, dtype=torch.float64))
    assert (m["erank"] == 0).all()


def test_hand_computed_two_positions():
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # mean (0.5, 0.5); centred rows (0.5, -0.5), (-0.5, 0.5)
    m = stream_uniformity(x)
    assert m["residual"].item() == pytest.approx(math.sqrt(0.5 * 0.5 * 4) / math.sqrt(2))  # 1 / sqrt 2
    assert m["cosine"].item() == pytest.approx(0.0)
    assert m["erank"].item() == pytest.approx(1.0)  # centred stream has rank 1: one singular value


def test_orthogonal_centred_directions_count_as_their_rank():
    e = torch.eye(4, dtype=torch.float64)
    x = torch.cat([e, -e])[None]  # 8 positions, mean 0, centred singular values all sqrt 2
    m = stream_uniformity(x)
    assert m["residual"].item() == pytest.approx(1.0)
    assert m["erank"].item() == pytest.approx(4.0)
    # cosines: each row has one opposite (-1) and six orthogonal (0) others: mean -1/7
    assert m["cosine"].item() == pytest.approx(-1 / 7)


def test_iid_rows_are_diverse():
    torch.manual_seed(0)
    x = torch.randn(4, 64, 256)
    m = stream_uniformity(x)
    assert m["residual"].min() > 0.98  # 1 - 1/n in expectation: sqrt(63/64) = 0.992
    assert m["cosine"].abs().max() < 0.01
    assert m["erank"].min() > 50  # near full rank 63 of the centred 64 x 256 stream


def test_a_common_offset_lowers_the_residual_not_the_rank():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    shifted = x + 10 * torch.randn(32)
    a, b = stream_uniformity(x), stream_uniformity(shifted)
    assert (b["residual"] < a["residual"] / 2).all()
    assert (b["cosine"] > 0.8).all()
    torch.testing.assert_close(a["erank"], b["erank"])  # centring removes the offset


def test_refuses_what_is_not_a_stream():
    with pytest.raises(ShapeError, match="batch, pos >= 2"):
        stream_uniformity(torch.randn(2, 1, 4))
    with pytest.raises(ShapeError):
        stream_uniformity(torch.randn(4, 4))


def _model(residual: str, **kw) -> ResidualGPT:
    torch.manual_seed(0)
    return ResidualGPT(ModelConfig(n_layers=3, n_heads=2, d_model=32, n_ctx=16, d_vocab=20, residual=residual, **kw))


def test_ffn_only_collapses_at_init_and_full_does_not():
    tokens = torch.randint(0, 20, (8, 17), generator=torch.Generator().manual_seed(1))
    full = token_uniformity(_model("full"), tokens)
    ffn = token_uniformity(_model("ffn_only"), tokens)
    assert full["sites"][-1] == "blocks.2.hook_resid_post" and len(full["residual"]) == 7
    assert full["residual"][-1] > 0.8
    assert ffn["residual"][-1] < full["residual"][-1] / 2
    assert ffn["cosine"][-1] > full["cosine"][-1]


def test_matches_the_stream_read_by_hand_and_restores_train_mode():
    model = _model("ffn_only")
    model.train()
    tokens = torch.randint(0, 20, (3, 9), generator=torch.Generator().manual_seed(2))
    out = token_uniformity(model, tokens)
    assert model.training
    model.eval()
    _, cache = model.run_with_cache(tokens[:, :-1])
    by_hand = stream_uniformity(cache["blocks.1.hook_resid_mid"])
    i = out["sites"].index("blocks.1.hook_resid_mid")
    for k in ("residual", "cosine", "erank"):
        assert out[k][i] == pytest.approx(by_hand[k].mean().item(), rel=1e-5)  # cached: the explicit attention path


def test_qk_grads_split_the_fused_projection_as_autograd_does():
    model = _model("ffn_only")
    tokens = torch.randint(0, 20, (4, 17), generator=torch.Generator().manual_seed(3))
    x, y = tokens[:, :-1], tokens[:, 1:]
    out = qk_grads(model, x, y)
    model.zero_grad()
    model.eval()
    _, loss = model(x, y)
    loss.backward()
    g = model.blocks[1].attn.in_proj.weight.grad
    assert out["q"][1] == pytest.approx(g[:32].norm().item(), rel=1e-6)
    assert out["k"][1] == pytest.approx(g[32:64].norm().item(), rel=1e-6)
    assert out["v"][1] == pytest.approx(g[64:].norm().item(), rel=1e-6)
    assert out["o"][1] == pytest.approx(model.blocks[1].attn.out_proj.weight.grad.norm().item(), rel=1e-6)
    assert out["loss"] == pytest.approx(loss.item(), rel=1e-6)


def test_qk_grads_skip_a_mixer_without_queries():
    model = ResidualGPT(ModelConfig(n_layers=1, n_heads=2, d_model=16, n_ctx=8, d_vocab=10, mixer="position_blind"))
    tokens = torch.randint(0, 10, (2, 9))
    assert "skipped" in qk_grads(model, tokens[:, :-1], tokens[:, 1:])


# On TL 4 to_hooked_transformer raises NeedsTransformerLens3 (the old in-body skip came after that import); the
# bridge reads the same token_uniformity, but qk_grads reads all zeros there (its W_Q... are not forward's weights).
@pytest.mark.skipif(TL4, reason="HookedTransformer only (TL 3.x); qk_grads reads zeros on the TL 4 bridge")
def test_the_export_reads_the_same():
    from interp import to_hooked_transformer

    model = _model("ffn_only")
    # unprocessed: the default's centred stream and folded W_Q... are another (exact) representation
    ht = to_hooked_transformer(model, fold_ln=False, center_writing_weights=False, center_unembed=False)
    tokens = torch.randint(0, 20, (4, 17), generator=torch.Generator().manual_seed(4))
    a, b = token_uniformity(model, tokens), token_uniformity(ht, tokens)
    for k in ("residual", "cosine", "erank"):
        assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5)
    ga, gb = qk_grads(model, tokens[:, :-1], tokens[:, 1:]), qk_grads(ht, tokens[:, :-1], tokens[:, 1:])
    for k in ("q", "k", "v", "o"):
        assert ga[k] == pytest.approx(gb[k], rel=1e-3)


@pytest.mark.skipif(TL4, reason="HookedTransformer only (TL 3.x)")
def test_a_processed_export_warns_at_every_call_that_its_numbers_are_not_residualgpts():
    """The export's defaults (fold_ln, center_writing_weights) centre the stream and fold the LayerNorm weights
    into W_Q...: token_uniformity and qk_grads then measure another representation, and say so each call."""
    import warnings

    from interp import to_hooked_transformer
    from interp.errors import ProcessedWeightsWarning

    model = _model("ffn_only")
    tokens = torch.randint(0, 20, (4, 17), generator=torch.Generator().manual_seed(4))
    processed = to_hooked_transformer(model)
    with pytest.warns(ProcessedWeightsWarning, match="fold_ln=False, center_writing_weights=False"):
        for _ in range(2):  # once per call, not once per line
            token_uniformity(processed, tokens)
    with pytest.warns(ProcessedWeightsWarning) as seen:
        for _ in range(2):
            qk_grads(processed, tokens[:, :-1], tokens[:, 1:])
    assert sum(issubclass(w.category, ProcessedWeightsWarning) for w in seen) == 2
    assert seen[0].filename == __file__  # at the caller's line, not the probe's
    raw = to_hooked_transformer(model, fold_ln=False, center_writing_weights=False, center_unembed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProcessedWeightsWarning)
        token_uniformity(raw, tokens), token_uniformity(model, tokens)


def test_a_non_finite_sequence_reads_nan_and_the_others_are_untouched():
    # a diverged stream used to stop svdvals (LinAlgError) and with it the training the probe rides on
    x = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(5))
    clean = stream_uniformity(x)
    x[0, 3, 2], x[1, 5, 0] = float("nan"), float("inf")
    out = stream_uniformity(x)
    for k, v in out.items():
        assert math.isnan(v[0].item()) and math.isnan(v[1].item())
        assert v[2].item() == pytest.approx(clean[k][2].item(), rel=1e-12)


def test_qk_grads_measure_frozen_weights_and_leave_them_frozen():
    model = _model("ffn_only")
    tokens = torch.randint(0, 20, (2, 17), generator=torch.Generator().manual_seed(4))
    x, y = tokens[:, :-1], tokens[:, 1:]
    want = qk_grads(model, x, y)
    model.blocks[0].attn.in_proj.weight.requires_grad_(False)
    assert qk_grads(model, x, y)["q"] == pytest.approx(want["q"], rel=1e-9)
    for p in model.parameters():
        p.requires_grad_(False)
    assert qk_grads(model, x, y)["k"] == pytest.approx(want["k"], rel=1e-9)
    assert not any(p.requires_grad for p in model.parameters())


def test_the_live_probe_writes_strict_json_when_the_stream_diverges(tmp_path):
    from interp.files.io import append_jsonl
    from probes.uniformity import finite_record

    record = {"step": 5, "residual": [0.5, float("nan")], "grads": {"q": [float("inf")], "loss": 1.0}}
    clean = finite_record(record)
    append_jsonl(tmp_path / "probes.jsonl", clean)  # would raise NonFiniteError on the raw record
    assert clean["residual"] == [0.5, None] and clean["grads"]["q"] == [None]
    assert clean["nonfinite"] == ["residual[1]", "grads.q[0]"]
    assert finite_record({"step": 1, "residual": [0.5]}) == {"step": 1, "residual": [0.5]}


def test_queries_and_keys_that_cannot_reach_the_loss_read_zero_not_an_error():
    model = _model("ffn_only", self_bias=float("inf"))  # attention reads only itself: W_Q, W_K do nothing
    tokens = torch.randint(0, 20, (2, 17), generator=torch.Generator().manual_seed(5))
    out = qk_grads(model, tokens[:, :-1], tokens[:, 1:])
    assert max(out["q"] + out["k"]) < 1e-6 * min(out["v"] + out["o"])  # rounding of the masked softmax only


@pytest.mark.skipif(not TL4, reason="the TransformerLens 4 bridge only")
def test_qk_grads_refuse_a_bridge_whose_weights_the_forward_does_not_use():
    from interp.errors import ToolkitError
    from interp.tl.bridge import to_transformer_bridge

    model = _model("ffn_only")
    bridge = to_transformer_bridge(model, vocab=[chr(ord("a") + k) for k in range(20)])
    tokens = torch.randint(0, 20, (2, 17), generator=torch.Generator().manual_seed(6))
    assert token_uniformity(bridge, tokens)["residual"] == pytest.approx(token_uniformity(model, tokens)["residual"])
    with pytest.raises(ToolkitError, match="ResidualGPT it wraps"):
        qk_grads(bridge, tokens[:, :-1], tokens[:, 1:])


def test_refusals_are_toolkit_errors_not_index_or_modulo_errors():
    # audit /tmp/audit_final C80, C81: y outside the vocabulary was cross_entropy's IndexError; interval 0 a
    # ZeroDivisionError at the first evaluation of the training the probe rides on
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11))
    x = torch.randint(0, 11, (2, 8))
    with pytest.raises(TokenIdError, match="qk_grads: y: token id 11 is outside the vocabulary"):
        qk_grads(model, x, torch.cat([x[:, 1:], torch.full((2, 1), 11)], dim=1))
    for bad in (0, -25, 2.5, True):
        with pytest.raises(ToolkitError, match="interval must be a positive integer"):
            UniformityProbe(bad)
    with pytest.raises(ToolkitError, match="n_batches must be a positive integer"):
        UniformityProbe(50, n_batches=0)
    with pytest.raises(ShapeError, match=r"\[batch, pos >= 2\] expected"):  # one position: nothing to compare
        token_uniformity(model, [(x[:, :1], x[:, :1])])


@pytest.mark.skipif(TL4, reason="a native HookedTransformer (TL 3.x)")
def test_a_site_the_model_does_not_have_is_left_out_not_read_as_collapsed():
    # audit /tmp/audit_final C93: TransformerLens's attn_only models have no hook_resid_mid; those sites read 0.0
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    torch.manual_seed(0)
    cfg = HookedTransformerConfig(
        n_layers=2, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_vocab=11, attn_only=True, normalization_type="LN"
    )
    model = HookedTransformer(cfg)
    x = torch.randint(0, 11, (2, 8))
    out = token_uniformity(model, [(x, x)])
    assert out["sites"] == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    _, cache = model.run_with_cache(x)
    for site, value in zip(out["sites"], out["residual"], strict=True):
        assert value == pytest.approx(stream_uniformity(cache[site])["residual"].mean().item())
