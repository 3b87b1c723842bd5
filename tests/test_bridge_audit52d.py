"""The TL 4 bridge against ResidualGPT where audit 52d found it silently wrong or obscure: routing W_Q @ W_K lacks,
in-place weight edits, the canonical hook_out names under runtime_gain, hook returns, token ids, removed residual
paths (stack_neuron_results, accumulated_bias), start_at_layer, generate(max_new_tokens=0).

Runs on TransformerLens 4 only (`make test-tl4`); on 3.x every test here skips.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from majors import TL4

pytestmark = pytest.mark.skipif(not TL4, reason="TransformerLens 4 only (make test-tl4)")

if TL4:
    from interp import ModelConfig, ResidualGPT, ToolkitError
    from interp.errors import (
        ConfigError,
        HiddenRoutingWarning,
        HookNameError,
        HookReturnError,
        ShapeError,
        TokenIdError,
    )
    from interp.reading.scores import attention_scores
    from interp.tl.bridge import to_transformer_bridge

CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def make_model(seed: int = 0, **changes) -> ResidualGPT:
    torch.manual_seed(seed)
    fields = dict(n_layers=3, d_model=32, n_heads=4, n_ctx=16, d_vocab=len(CHARS), init_std=0.2)
    model = ResidualGPT(ModelConfig(**{**fields, **changes}))
    if model.cfg.bias:  # biases away from zero, so an edit or a sum of them shows
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("bias", ".b")):
                    p.copy_(0.3 * torch.randn_like(p))
    return model.eval()


def bridge(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_transformer_bridge(model, vocab=CHARS)


def tokens(n: int = 12, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, len(CHARS), (batch, n), generator=torch.Generator().manual_seed(1))


def routing_warnings(read) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read()
    return [str(w.message) for w in caught if issubclass(w.category, HiddenRoutingWarning)]


# --------------------------------------------------------------------------- 1. routing W_Q @ W_K does not show

READS = {
    "QK": lambda b: b.QK,
    "W_Q": lambda b: b.W_Q,
    "W_K": lambda b: b.W_K,
    "QK_for_attn_layers": lambda b: b.QK_for_attn_layers(),
    "blocks[1].attn.QK": lambda b: b.blocks[1].attn.QK,
    "blocks[1].attn.W_Q": lambda b: b.blocks[1].attn.W_Q,
    "blocks[1].attn.W_K": lambda b: b.blocks[1].attn.W_K,
}


@pytest.mark.parametrize("read", READS)
def test_routed_model_warns_at_every_qk_read_once(read):
    b = bridge(make_model(residual="ffn_only", self_bias=4.0))
    got = routing_warnings(lambda: READS[read](b))
    assert len(got) == 1, got  # a model-level read warns once, not once per block
    assert "self_bias=4" in got[0] and "interp.reading.scores.attention_scores" in got[0]


@pytest.mark.parametrize("changes", [{}, {"mixer": "uniform"}], ids=["self_bias=0", "uniform (W_Q = 0 shows it)"])
def test_unrouted_qk_reads_say_nothing(changes):
    b = bridge(make_model(**changes))
    assert all(routing_warnings(lambda r=r: READS[r](b)) == [] for r in READS)


def test_attention_scores_named_by_the_warning_takes_the_bridge():
    model = make_model(residual="ffn_only", self_bias=4.0)
    b, t = bridge(model), tokens()
    _, cache = b.run_with_cache(t)
    for layer in range(model.cfg.n_layers):
        want = cache["attn_scores", layer]
        got = attention_scores(b, cache["q", layer], cache["k", layer])
        finite = torch.isfinite(want)
        assert torch.equal(finite, torch.isfinite(got))
        torch.testing.assert_close(got[finite], want[finite], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- 2. in-place weight edits


def _z_ablation_truth(model, t, layer, head):
    def zero(z, hook):
        z[:, :, head] = 0.0

    return model.run_with_hooks(t, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])


def _neuron_ablation_truth(model, t, layer, k):
    def zero(post, hook):
        post[..., :k] = 0.0

    return model.run_with_hooks(t, fwd_hooks=[(f"blocks.{layer}.mlp.hook_post", zero)])


EDITS = {  # how a user zeroes part of a weight in place
    "index": lambda w, idx: w.__setitem__(idx, 0.0),
    "data": lambda w, idx: w.data.__setitem__(idx, 0.0),
    "view.zero_": lambda w, idx: w[idx].zero_(),
}


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_w_o_and_w_out_edits_reach_the_model(gain, edit):
    model = make_model(runtime_gain=gain)
    t = tokens()
    b = bridge(model)
    with torch.no_grad():
        EDITS[edit](b.blocks[1].attn.W_O, 2)
    torch.testing.assert_close(b(t), _z_ablation_truth(model, t, 1, 2), rtol=1e-5, atol=1e-5)
    b = bridge(model)
    with torch.no_grad():
        EDITS[edit](b.blocks[1].mlp.W_out, slice(None, 50))
    torch.testing.assert_close(b(t), _neuron_ablation_truth(model, t, 1, 50), rtol=1e-5, atol=1e-5)


NAMES = {
    "attn": ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"),
    "mlp": ("W_in", "b_in", "W_out", "b_out"),
}


@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_every_block_weight_edit_reads_back_and_moves_the_logits(gain):
    model = make_model(bias=True, runtime_gain=gain)
    b, t = bridge(model), tokens()
    for part, names in NAMES.items():
        for name in names:
            before = b(t)
            with torch.no_grad():
                getattr(getattr(b.blocks[0], part), name)[0] = 0.5  # first head / row / entry
            again = getattr(getattr(b.blocks[0], part), name)[0]
            torch.testing.assert_close(again, torch.full_like(again, 0.5), msg=f"{part}.{name}")
            assert not torch.equal(b(t), before), f"{part}.{name}: edit did not reach the model"
    for name in ("W_E", "W_pos", "W_U"):
        before = b(t)
        with torch.no_grad():
            getattr(b, name)[3] = 0.0
        assert not torch.equal(b(t), before), name


def test_weights_the_model_lacks_refuse_an_edit():
    b = bridge(make_model(bias=False))
    with torch.no_grad():
        for read in (lambda: b.blocks[0].attn.b_O, lambda: b.blocks[0].mlp.b_out, lambda: b.b_U):
            with pytest.raises(ToolkitError, match="computed by the bridge.*residual_gpt"):
                read()[0] = 1.0
            with pytest.raises(ToolkitError, match="computed by the bridge"):
                read().data.zero_()
            assert float(read().abs().sum()) == 0.0
    u = bridge(make_model(mixer="uniform"))
    with torch.no_grad(), pytest.raises(ToolkitError, match="blocks\\[0\\].attn.W_Q"):
        u.blocks[0].attn.W_Q[0] = 1.0


def test_derived_weights_compute_as_plain_tensors():
    b = bridge(make_model(runtime_gain=2.5))
    w_o = b.blocks[0].attn.W_O
    product = w_o @ torch.ones(w_o.shape[-1])
    assert type(product) is torch.Tensor
    product.add_(1.0)  # an in-place edit of a fresh result: not the weight's business
    torch.testing.assert_close(b.blocks[0].attn.W_O, w_o)


# --------------------------------------------------------------------------- 3. canonical hook_out under runtime_gain


def test_canonical_sublayer_hook_out_is_what_the_block_adds():
    model = make_model(runtime_gain=2.5)
    b, t = bridge(model), tokens()
    _, cache = b.run_with_cache(t)
    for layer in range(model.cfg.n_layers):
        assert torch.equal(cache[f"blocks.{layer}.attn.hook_out"], cache[f"blocks.{layer}.hook_attn_out"])
        assert torch.equal(cache[f"blocks.{layer}.mlp.hook_out"], cache[f"blocks.{layer}.hook_mlp_out"])
    assert torch.equal(b(t), model(t))  # nothing hooked: exact

    def halve(x, hook):
        return x / 2

    want = model.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_attn_out", halve), ("blocks.0.hook_mlp_out", halve)])
    got = b.run_with_hooks(t, fwd_hooks=[("blocks.1.attn.hook_out", halve), ("blocks.0.mlp.hook_out", halve)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_canonical_hook_out_gradient_is_the_stream_contributions():
    model = make_model(runtime_gain=2.5)
    b, t = bridge(model), tokens(batch=1)
    grads = {}

    def keep(name):
        def hook(grad, hook):
            grads[name] = grad.detach().clone()

        return hook

    with b.hooks(bwd_hooks=[("blocks.1.attn.hook_out", keep("canonical")), ("blocks.1.hook_attn_out", keep("tl3"))]):
        b(t)[0, -1, 3].backward()
    torch.testing.assert_close(grads["canonical"], grads["tl3"])


# --------------------------------------------------------------------------- 4. hook returns

BAD_RETURNS = {
    "blocks.1.hook_attn_out": lambda x, hook: x[..., :1],
    "blocks.2.hook_resid_post": lambda x, hook: x[:, :5],
    "blocks.1.hook_resid_mid": lambda x, hook: x[..., :1],
    "blocks.0.attn.hook_out": lambda x, hook: x[0],
    "blocks.0.attn.hook_pattern": lambda x, hook: x.double(),
}


def _run_hooks_api(b, api, t, name, fn):
    if api == "run_with_hooks":
        return b.run_with_hooks(t, fwd_hooks=[(name, fn)])
    if api == "hooks":
        with b.hooks(fwd_hooks=[(name, fn)]):
            return b(t)
    try:
        b.add_hook(name, fn)
        return b(t)
    finally:
        b.reset_hooks()


@pytest.mark.parametrize("api", ["run_with_hooks", "hooks", "add_hook"])
@pytest.mark.parametrize("name", BAD_RETURNS)
def test_a_hook_return_of_another_shape_or_dtype_is_refused(name, api):
    b = bridge(make_model())
    with pytest.raises(HookReturnError, match=name.replace(".", "\\.")):
        _run_hooks_api(b, api, tokens(), name, BAD_RETURNS[name])


@pytest.mark.parametrize("api", ["run_with_hooks", "hooks", "add_hook"])
def test_a_hook_returning_a_whole_edited_tensor_still_patches(api):
    model = make_model()
    b, t = bridge(model), tokens()

    def scale(x, hook):
        return x * 3

    want = model.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_mid", scale)])
    assert torch.equal(_run_hooks_api(b, api, t, "blocks.1.hook_resid_mid", scale), want)


# --------------------------------------------------------------------------- 5-6. token ids


@pytest.mark.parametrize("ids", [[5, 7, 1000], [5, 7, len(CHARS) + 1], [-1, 5, 7]], ids=["1000", "past specials", "-1"])
def test_an_id_outside_the_vocabulary_and_the_specials_is_refused(ids):
    model = make_model()
    b = bridge(model)
    with pytest.raises(TokenIdError, match=f"token id {min(ids) if min(ids) < 0 else max(ids)}"):
        b(torch.tensor([ids]))
    with pytest.raises(TokenIdError):
        model(torch.tensor([ids]))


def test_the_tokenizers_special_id_still_embeds_as_zeros_at_the_end():
    model = make_model()
    b = bridge(model)
    t = torch.tensor([[5, 7, len(CHARS)]])  # <|endoftext|>, the char tokenizer's pad: trailing, no word
    torch.testing.assert_close(b(t)[:, :2], model(t[:, :2]))


@pytest.mark.parametrize("ids", [-1, torch.tensor([3, -1]), [3, -2], len(CHARS), torch.tensor(len(CHARS))], ids=str)
def test_residual_directions_refuse_ids_outside_the_vocabulary(ids):
    model = make_model()
    b = bridge(model)
    with pytest.raises(TokenIdError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b.tokens_to_residual_directions(ids)
    with pytest.raises(TokenIdError):
        model.tokens_to_residual_directions(ids)


def test_residual_directions_of_a_list_are_w_u_columns():
    model = make_model()
    b = bridge(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = b.tokens_to_residual_directions([3, 64])
    assert torch.equal(got, model.tokens_to_residual_directions([3, 64]))


def test_residual_directions_as_on_the_3x_export_for_one_listed_id_and_the_special_token():
    """One guard for both majors (interp.tl.guards): a list of one id is one row, as on ResidualGPT and the 3.x
    export (TL 4 gave the bare column), and the tokenizer's <|endoftext|>, which has no logit, a TokenIdError
    (TL 4 indexed W_U past its end)."""
    model = make_model()
    b = bridge(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = b.tokens_to_residual_directions([3])
        with pytest.raises(TokenIdError, match="outside the vocabulary"):
            b.tokens_to_residual_directions("<|endoftext|>")
    assert torch.equal(got, model.tokens_to_residual_directions([3]))


# --------------------------------------------------------------------------- 7. removed residual paths


def test_stack_neuron_results_and_accumulated_bias_refuse_a_removed_residual():
    b = bridge(make_model(residual="attn_only", bias=True))
    _, cache = b.run_with_cache(tokens())
    with pytest.raises(ToolkitError, match="stack_neuron_results.*residual='attn_only'.*interp.reading.decompose"):
        cache.stack_neuron_results(layer=3, pos_slice=-1, apply_ln=False)
    with pytest.raises(ToolkitError, match="accumulated_bias.*residual='attn_only'"):
        b.accumulated_bias(2)


def test_accumulated_bias_on_a_full_residual_is_every_earlier_bias():
    model = make_model(bias=True, runtime_gain=1.5)
    b = bridge(model)
    g = model.cfg.runtime_gain
    want = sum(g * (blk.attn.out_proj.bias + blk.mlp.out_proj.bias) for blk in model.blocks[:2])
    torch.testing.assert_close(b.accumulated_bias(2), want)
    _, cache = b.run_with_cache(tokens())
    stack = cache.stack_neuron_results(layer=2, pos_slice=-1, apply_ln=False)
    assert stack.shape[0] == 2 * model.cfg.d_mlp


# --------------------------------------------------------------------------- 8. start_at_layer


@pytest.mark.parametrize("residual", ["full", "attn_only"])
def test_start_at_layer_runs_residual_gpts_blocks_from_there(residual):
    model = make_model(residual=residual)
    b, t = bridge(model), tokens()
    _, cache = model.run_with_cache(t)
    resid = cache["blocks.2.hook_resid_pre"]
    want = model.unembed(model.ln_final(model.blocks[2](resid)))
    assert torch.equal(b(resid, start_at_layer=2), want)
    torch.testing.assert_close(b(t), model(t))  # the plain forward is unchanged after it

    def double(x, hook):
        return x * 2

    truth = model.run_with_hooks(t, fwd_hooks=[("blocks.2.hook_attn_out", double)])
    got = b.run_with_hooks(resid, fwd_hooks=[("blocks.2.hook_attn_out", double)], start_at_layer=2)
    torch.testing.assert_close(got, truth, rtol=1e-5, atol=1e-5)


def test_a_float_input_without_start_at_layer_is_one_line():
    b = bridge(make_model())
    with pytest.raises(ConfigError, match="start_at_layer"):
        b(torch.randn(1, 4, 32))


# --------------------------------------------------------------------------- 9. generate(max_new_tokens=0)


def test_generate_zero_new_tokens_returns_the_prompt():
    model = make_model()
    b, t = bridge(model), tokens(n=6, batch=1)
    assert torch.equal(b.generate(t, max_new_tokens=0, verbose=False), model.generate(t, 0))
    assert torch.equal(b.generate(t, 0, verbose=False, return_type="tokens"), t)
    assert b.generate("ROMEO:", max_new_tokens=0, verbose=False) == "ROMEO:"
    assert b.generate(t, max_new_tokens=0, return_type="str", verbose=False) == "".join(CHARS[i] for i in t[0])
    with pytest.raises(ConfigError, match="max_new_tokens=0"):
        b.generate(t, max_new_tokens=0, return_cache=True, verbose=False)


# --------------------------------------------------------------------------- audit 52e: names and batches


@pytest.mark.parametrize(
    "names", ["blocks.0.hook_resid_pree", ["blocks.0.hook_resid_pre", "blocks.9.hook_resid_pre"], lambda n: n == "x"]
)
def test_a_names_filter_naming_no_hook_point_is_a_hook_name_error(names):
    """TL 4 raised a bare KeyError for one unknown name and cached less, silently, for a list holding one or a
    filter matching nothing; ResidualGPT and the 3.x export raise HookNameError with the closest names."""
    b = bridge(make_model())
    with pytest.raises(HookNameError, match="names_filter"):
        b.run_with_cache(tokens(), names_filter=names)


def test_hooks_on_an_unknown_name_are_a_hook_name_error_naming_the_closest():
    b = bridge(make_model())
    keep = lambda x, hook: x  # noqa: E731
    with pytest.raises(HookNameError, match="closest: blocks.0.hook_resid_pre"):
        b.run_with_hooks(tokens(), fwd_hooks=[("blocks.0.hook_resid_pree", keep)])
    with pytest.raises(HookNameError, match="closest"):
        b.add_hook("blocks.0.hook_resid_pree", keep)
    with pytest.raises(HookNameError):
        with b.hooks(bwd_hooks=[("blocks.0.hook_resid_pree", keep)]):
            pass
    _, cache = b.run_with_cache(tokens(), names_filter=["blocks.0.hook_resid_pre", "hook_embed"])
    assert sorted(cache.keys()) == ["blocks.0.hook_resid_pre", "hook_embed"]


def test_remove_batch_dim_on_a_batch_of_two_is_a_shape_error():
    b = bridge(make_model())
    with pytest.raises(ShapeError, match="remove_batch_dim"):
        b.run_with_cache(tokens(batch=2), remove_batch_dim=True)
    _, cache = b.run_with_cache(tokens(batch=1), remove_batch_dim=True)
    assert cache["hook_embed"].dim() == 2


@pytest.mark.parametrize("ids", [[5, -1], [5, len(CHARS) + 1], torch.tensor([5, -1])])
def test_to_string_of_an_id_outside_the_tokenizer_is_a_token_id_error(ids):
    """Audit 52f: TL 4's decode ended in a bare OverflowError for -1 (the 3.x export says TokenIdError)."""
    b = bridge(make_model())
    with pytest.raises(TokenIdError):
        b.to_string(ids)
    assert b.to_string([5, len(CHARS)]) == CHARS[5] + "<|endoftext|>"  # the tokenizer's own special id decodes
