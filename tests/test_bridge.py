"""interp.tl.bridge: every checkpoint as a TransformerLens 4 TransformerBridge running ResidualGPT's forward.

Runs on TransformerLens 4 only (`make test-tl4`); on 3.x every test here skips.
"""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

from interp.tl.major import TL_MAJOR

pytestmark = pytest.mark.skipif(TL_MAJOR < 4, reason="TransformerLens 4 only (make test-tl4)")

if TL_MAJOR >= 4:
    import transformer_lens.patching as patching

    import interp
    import interp.reading.decompose as decompose
    from interp import CheckpointError, ConfigError, DataError, ModelConfig, ResidualGPT, ToolkitError
    from interp.tl.bridge import ResidualBridge, load_bridge, save_bridge, to_transformer_bridge

CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
CONFIGS = {  # id -> (residual, mixer, self_bias)
    "full": ("full", "attention", 0.0),
    "attn_only": ("attn_only", "attention", 0.0),
    "ffn_only": ("ffn_only", "attention", 0.0),
    "none": ("none", "attention", 0.0),
    "attn_only+uniform": ("attn_only", "uniform", 0.0),
    "attn_only+position_blind": ("attn_only", "position_blind", 0.0),
    "ffn_only+self_bias": ("ffn_only", "attention", 4.0),
    "full+self_bias=inf": ("full", "attention", math.inf),
    "none+self_bias=-inf": ("none", "attention", -math.inf),
}


def make_model(residual="full", mixer="attention", self_bias=0.0, trained=False, seed=0, **changes) -> ResidualGPT:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_ctx=16,
        d_vocab=len(CHARS),
        residual=residual,
        mixer=mixer,
        self_bias=self_bias,
        init_std=0.02 if trained else 0.2,
        **changes,
    )
    model = ResidualGPT(cfg)
    if trained:  # a few Adam steps on random tokens: weights no longer look like their init
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(8):
            t = torch.randint(0, cfg.d_vocab, (4, cfg.n_ctx), generator=gen)
            opt.zero_grad()
            model(t[:, :-1], t[:, 1:])[1].backward()
            opt.step()
    return model.eval()


def bridge(model, **kwargs):
    return to_transformer_bridge(model, vocab=CHARS, **kwargs)


def tokens(batch=3, n=16, seed=1):
    return torch.randint(0, len(CHARS), (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("trained", [False, True], ids=["random", "trained"])
@pytest.mark.parametrize("config", CONFIGS)
def test_logits_and_every_shared_hook_equal_residual_gpt(config, trained):
    model = make_model(*CONFIGS[config], trained=trained)
    b = bridge(model)
    t = tokens()
    with torch.no_grad():
        want_logits, want = model.run_with_cache(t)
        got_logits, got = b.run_with_cache(t)
    assert torch.equal(got_logits, want_logits)  # the same forward: bit for bit
    assert set(want.keys()) <= set(got.keys())  # every ResidualGPT hook name is on the bridge
    for name in want.keys():
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, msg=name)
    assert "blocks.0.hook_in" in got.keys() and "blocks.1.attn.hook_out" in got.keys()  # TL 4's own names too


def test_the_given_model_is_left_as_it_was():
    model = make_model("attn_only")
    blocks = list(model.blocks)
    bridge(model)
    assert list(model.blocks) == blocks and type(model.blocks[0].attn).__name__ == "CausalAttention"


def test_patching_resid_mid_changes_the_residual_and_the_mlp_input():
    # TL 4's BlockBridge aliases hook_resid_mid to ln2's input; here it is the block's own value, as on 3.x.
    model = make_model("full")
    b = bridge(model)
    t = tokens(1)

    def zero(x, hook):
        return torch.zeros_like(x)

    want = model.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_mid", zero)])
    got = b.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_mid", zero)])
    assert torch.equal(got, want)
    ln2_only = b.run_with_hooks(t, fwd_hooks=[("blocks.1.ln2.hook_in", zero)])
    assert not torch.allclose(ln2_only, got)  # the residual path still carried resid_mid there


@pytest.mark.parametrize("config", ["full", "ffn_only", "attn_only+uniform"])
def test_transformer_lens_patching_matches_residual_gpt(config):
    model = make_model(*CONFIGS[config], trained=True)
    b = bridge(model)
    clean, corrupt = tokens(1, seed=2), tokens(1, seed=3)

    def metric(logits):
        return logits[0, -1, 5] - logits[0, -1, 6]

    _, clean_cache = model.run_with_cache(clean)
    _, bridge_cache = b.run_with_cache(clean)
    want = patching.get_act_patch_resid_pre(model, corrupt, clean_cache, metric)
    got = patching.get_act_patch_resid_pre(b, corrupt, bridge_cache, metric)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_hook_result_is_each_heads_share_of_attn_out():
    model = make_model("attn_only", trained=True, bias=True, runtime_gain=2.0)
    b = bridge(model)
    t = tokens()
    with pytest.raises(Exception, match="use_attn_result"):
        b.run_with_hooks(t, fwd_hooks=[("blocks.0.attn.hook_result", lambda x, hook: x)])
    b.set_use_attn_result(True)
    logits, cache = b.run_with_cache(t)
    result = cache["blocks.0.attn.hook_result"]
    assert result.shape == (3, 16, 4, 32)
    bias = model.blocks[0].attn.out_proj.bias * 2.0
    torch.testing.assert_close(result.sum(-2) + bias, cache["blocks.0.hook_attn_out"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, model(t), rtol=0, atol=1e-5)
    b.set_use_attn_result(False)
    assert torch.equal(b(t), model(t))


def test_position_blind_has_no_attention_hooks_and_says_so():
    model = make_model("attn_only", "position_blind")
    b = bridge(model)
    t = tokens()
    _, cache = b.run_with_cache(t)
    assert "blocks.0.attn.hook_pre" in cache.keys() and "blocks.0.attn.hook_pattern" not in cache.keys()
    with pytest.raises(ToolkitError, match="position_blind"):
        b.run_with_hooks(t, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: x)])
    with pytest.raises(ToolkitError, match="position_blind"):
        cache["pattern", 0]
    with pytest.raises(ToolkitError, match="position_blind"):
        cache["blocks.1.attn.hook_z"]
    with pytest.raises(ToolkitError, match="position_blind"):
        b.set_use_attn_result(True)


def test_toolkit_hooks_reachable_by_name():
    model = make_model("ffn_only", "attention", 4.0)
    b = bridge(model)
    t = tokens()
    seen = {}
    name = "blocks.0.attn.hook_attn_scores"  # the routed scores, self_bias applied
    b.run_with_hooks(t, fwd_hooks=[(name, lambda x, hook: seen.setdefault("bridge", x))])
    model.run_with_hooks(t, fwd_hooks=[(name, lambda x, hook: seen.setdefault("model", x))])
    assert torch.equal(seen["bridge"], seen["model"])  # same hooks, same (fused or explicit) paths


@pytest.mark.parametrize("residual", ["attn_only", "ffn_only", "none"])
def test_ablated_caches_refuse_additive_methods_and_decompose_is_exact(residual):
    model = make_model(residual, trained=True)
    b = bridge(model)
    t = tokens()
    _, cache = b.run_with_cache(t)
    for call in (
        lambda: cache.decompose_resid(),
        lambda: cache.get_full_resid_decomposition(),
        lambda: cache.stack_head_results(),
        lambda: cache.logit_attrs(cache["ln_final.hook_normalized"], tokens=torch.tensor([3])),
    ):
        with pytest.raises(ToolkitError, match="interp.reading.decompose"):
            call()
    for site in ("blocks.0.hook_resid_mid", "blocks.1.hook_resid_post"):
        assert decompose.decomposition_error(cache, site) <= 1e-5
    dla = decompose.direct_logit_attribution(cache, tokens=5)
    torch.testing.assert_close(dla.total(), b(t)[..., 5], rtol=0, atol=1e-4)
    _, ours = model.run_with_cache(t)
    sites, lens = decompose.logit_lens(cache)
    _, want = decompose.logit_lens(ours, model)
    torch.testing.assert_close(lens, want, rtol=0, atol=0)


def test_full_model_additive_methods_work():
    b = bridge(make_model("full"))
    _, cache = b.run_with_cache(tokens())
    stack, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    torch.testing.assert_close(stack.sum(0), cache["blocks.1.hook_resid_post"], rtol=0, atol=1e-5)


def test_char_tokenizer_round_trips_newlines_and_refuses_unknown_characters():
    b = bridge(make_model())
    text = "ab\ncd e\n"
    t = b.to_tokens(text)
    assert t.tolist() == [[CHARS.index(c) for c in text]]  # no BOS, newline an ordinary token
    assert b.to_string(t[0]) == text
    assert b.to_str_tokens("a\nb") == ["a", "\n", "b"]
    with pytest.raises(DataError, match="not in the model"):
        b.to_tokens("ab~")
    with pytest.raises(ConfigError, match="exceeds the context"):
        b.to_tokens("a" * 40)


def test_generate_greedy_agrees_with_residual_gpt_on_prompts_with_newlines():
    model = make_model("attn_only", trained=True)
    b = bridge(model)
    for prompt in ("a\nb", "KING:\n"):
        t = b.to_tokens(prompt)
        want = model.generate(t, 6, temperature=0)
        got = b.generate(t, max_new_tokens=6, do_sample=False, verbose=False)
        assert torch.equal(got, want)
        text = b.generate(prompt, max_new_tokens=6, do_sample=False, verbose=False)
        assert text == b.to_string(want[0])


def test_context_length_is_a_clear_error_and_generate_crops():
    b = bridge(make_model())
    with pytest.raises(ConfigError, match="exceeds n_ctx 16"):
        b(torch.zeros(1, 17, dtype=torch.long))
    out = b.generate(b.to_tokens("abcdefghij"), max_new_tokens=10, do_sample=False, verbose=False)
    assert out.shape == (1, 20)  # past n_ctx generate crops to the last n_ctx tokens, as on the 3.x export


def test_right_padded_batch_and_the_special_token():
    model = make_model()
    b = bridge(model)
    t = b.to_tokens(["ab\nc", "abcdef"], padding_side="right")
    assert t[0, -1].item() == len(CHARS)  # <|endoftext|> pads
    logits = b(t, attention_mask=(t != len(CHARS)).long())
    # a (2, 6) batch and a (1, 4) one take different matmul blockings: equal to float rounding, not bit for bit
    torch.testing.assert_close(logits[0, :4], model(t[:1, :4])[0], rtol=0, atol=1e-5)
    with pytest.raises(ConfigError, match="right"):
        b(t, attention_mask=torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]))


def test_gpt2_bpe_tokenizer():
    from interp.files.gpt2 import GPT2_VOCAB_SIZE, gpt2_files

    if gpt2_files() is None:
        pytest.skip("GPT-2 BPE files not found (set RESIDUAL_DATA_DIR to a folder holding gpt2/)")
    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=16, d_vocab=GPT2_VOCAB_SIZE)).eval()
    b = to_transformer_bridge(model)
    t = b.to_tokens("Hello world\n<|endoftext|>")
    assert t[0, -1].item() == 50256 and b.to_string(t[0]) == "Hello world\n<|endoftext|>"
    assert torch.equal(b(t), model(t))


def test_save_and_load_round_trip_exactly(tmp_path):
    model = make_model("ffn_only", "uniform", trained=True)
    b = bridge(model)
    save_bridge(b, tmp_path / "b.pt")
    again = load_bridge(tmp_path / "b.pt")
    t = tokens()
    assert isinstance(again, ResidualBridge) and again.tokenizer.chars == CHARS
    assert torch.equal(again(t), b(t))
    with pytest.raises(CheckpointError, match="schema"):
        torch.save({"schema": "nope"}, tmp_path / "x.pt")
        load_bridge(tmp_path / "x.pt")


def test_state_dict_carries_the_wiring_and_a_plain_tl4_model_refuses_it():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    b = bridge(make_model("attn_only", trained=True))
    sd = b.state_dict()
    assert sd["wiring.attn_residual"].item() is True and sd["wiring.ffn_residual"].item() is False
    fresh = bridge(make_model("attn_only", seed=5))
    fresh.load_state_dict(sd)
    assert torch.equal(fresh(tokens()), b(tokens()))
    with pytest.raises(CheckpointError, match="wiring"):
        bridge(make_model("full")).load_state_dict(sd)
    cfg = TransformerBridgeConfig(
        d_model=32,
        d_head=8,
        n_heads=4,
        n_layers=2,
        n_ctx=16,
        d_vocab=len(CHARS),
        d_mlp=128,
        act_fn="gelu",
        normalization_type="LN",
        architecture="TransformerLensNative",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = TransformerBridge.boot_native(cfg)
    with pytest.raises(Exception, match="wiring"):  # "Unexpected key(s) ... wiring.attn_residual"
        plain.load_state_dict(sd, strict=True)


def test_load_tl_and_to_hooked_transformer_on_tl4(tmp_path):
    from interp import save_checkpoint

    model = make_model("attn_only")
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, vocab=CHARS)
    b = interp.load_tl(path)  # the checkpoint's vocab gives the tokenizer
    assert isinstance(b, ResidualBridge) and b.to_string(b.to_tokens("a\nb")[0]) == "a\nb"
    assert torch.equal(b(tokens()), model(tokens()))
    with pytest.raises(ToolkitError, match="to_transformer_bridge"):
        interp.to_hooked_transformer(model)
    with pytest.raises(ToolkitError, match="to_transformer_bridge"):
        importlib.import_module("interp.tl.hooked")


def test_nnsight_reads_and_edits_hook_pattern_on_the_bridge():
    nnsight = pytest.importorskip("nnsight")
    model = make_model("attn_only", trained=True)
    b = bridge(model)
    t = tokens(1)
    _, cache = model.run_with_cache(t)
    traced = nnsight.NNsight(b)
    with traced.trace(t):
        pattern = traced.blocks[0].attn.hook_pattern.output.save()
        traced.blocks[1].attn.hook_pattern.output[:] = 0
        out = traced.output.save()
    torch.testing.assert_close(pattern, cache["blocks.0.attn.hook_pattern"], rtol=0, atol=1e-6)
    want = model.run_with_hooks(t, fwd_hooks=[("blocks.1.attn.hook_pattern", lambda x, hook: torch.zeros_like(x))])
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)


def test_weight_properties_compute_what_the_hooks_see():
    """W_Q ... b_out are ResidualGPT's weights in TL's layout (runtime_gain folded into the writing weights)."""
    model = make_model("attn_only", trained=True, bias=True, runtime_gain=1.5)
    b = bridge(model)
    with torch.no_grad():
        _, cache = b.run_with_cache(tokens())
        for layer in range(2):
            block, ln = model.blocks[layer], f"blocks.{layer}.ln1"
            x = cache[f"{ln}.hook_normalized"] * block.ln1.w + block.ln1.b
            q = torch.einsum("bpd,hde->bphe", x, b.W_Q[layer]) + b.b_Q[layer]
            assert (q - cache[f"blocks.{layer}.attn.hook_q"]).abs().max() < 1e-5
            z = cache[f"blocks.{layer}.attn.hook_z"]
            out = torch.einsum("bphe,hed->bpd", z, b.W_O[layer]) + b.b_O[layer]
            assert (out - cache[f"blocks.{layer}.hook_attn_out"]).abs().max() < 1e-5
            y = cache[f"blocks.{layer}.ln2.hook_normalized"] * block.ln2.w + block.ln2.b
            mlp = torch.nn.functional.gelu(y @ b.W_in[layer] + b.b_in[layer]) @ b.W_out[layer] + b.b_out[layer]
            assert (mlp - cache[f"blocks.{layer}.hook_mlp_out"]).abs().max() < 1e-5
    assert b.OV.AB.shape == (2, 4, 32, 32) and b.QK.AB.shape == (2, 4, 32, 32)
    assert torch.equal(b.W_U, model.unembed.weight.T)
    uniform = bridge(make_model("full", mixer="uniform"))
    assert not uniform.W_Q.any() and not uniform.W_K.any()  # as the 3.x export's
    blind = bridge(make_model("full", mixer="position_blind"))
    with pytest.raises(ToolkitError, match="mixer='position_blind' has no TransformerLens attention weights"):
        _ = blind.OV
    assert blind.W_in.shape == (2, 32, 128)


def test_weight_processing_is_refused_or_a_no_op():
    model = make_model("ffn_only", trained=True)
    b = bridge(model)
    for call in (b.enable_compatibility_mode, lambda: b.enable_compatibility_mode(fold_ln=True), b.process_weights):
        with pytest.raises(ToolkitError, match="weight processing.*interp.reading.decompose"):
            call()
    b.enable_compatibility_mode(no_processing=True)
    assert torch.equal(b(tokens()), model(tokens()))


def test_generate_on_prompts_of_unequal_lengths_runs_each_alone():
    model = make_model("attn_only", trained=True)
    b = bridge(model)
    prompts = ["ROMEO:\n", "KING:", "a\n\nb"]
    got = b.generate(prompts, max_new_tokens=5, do_sample=False, verbose=False)
    expected = [b.generate(p, max_new_tokens=5, do_sample=False, verbose=False) for p in prompts]
    assert got == expected
    for prompt, text in zip(prompts, got, strict=True):
        ids = torch.tensor([[CHARS.index(c) for c in prompt]])
        assert text == "".join(CHARS[i] for i in model.generate(ids, 5, temperature=0.0)[0])
    with pytest.raises(ConfigError, match="one at a time"):
        b.generate(prompts, max_new_tokens=2, do_sample=False, verbose=False, return_type="tokens")
    with pytest.raises(ConfigError, match="right"):  # a left-padded batch with its mask
        toks = b.to_tokens(prompts[:2], padding_side="left")
        b(toks, attention_mask=(toks != len(CHARS)).long())


def test_state_dict_of_another_mixer_is_refused():
    sd = bridge(make_model("full", mixer="uniform")).state_dict()
    with pytest.raises(CheckpointError, match="wiring.mixer='uniform' is not this model's \\('attention'\\)"):
        bridge(make_model("full")).load_state_dict(sd)


def test_logit_attrs_on_a_full_bridge_warns_that_ln_final_w_is_left_out():
    from interp.errors import LogitAttrsWarning

    b = bridge(make_model("full", trained=True))
    _, cache = b.run_with_cache(tokens())
    with pytest.warns(LogitAttrsWarning, match="fold_ln=True"):
        cache.logit_attrs(cache["ln_final.hook_normalized"], tokens=torch.tensor([3]))


def test_generate_past_n_ctx_crops_as_residual_gpt_does():
    model = make_model("attn_only", trained=True)
    b = bridge(model)
    n_new = model.cfg.n_ctx + 5
    ours = model.eval().generate(b.to_tokens("AB"), n_new, temperature=0)
    theirs = b.generate(b.to_tokens("AB"), max_new_tokens=n_new, do_sample=False, verbose=False)
    assert torch.equal(theirs, ours)
