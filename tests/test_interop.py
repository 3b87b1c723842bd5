"""ResidualGPT and its export used as researchers use them: ActivationCache, TL patching, save/load, nnsight."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformer_lens.patching as patching
from majors import TL4, tl3_only
from test_hooked import CHARS, RESIDUALS, ROUTINGS, TOL, convert, make_model, tokens
from transformer_lens import ActivationCache

import interp
from interp import CheckpointError, ToolkitError, save_checkpoint


@pytest.mark.parametrize("residual", RESIDUALS)
def test_run_with_cache_is_an_activation_cache(residual):
    model = make_model("trained", residual=residual)
    tl = convert(model)
    toks = tokens(n=12)
    with torch.no_grad():
        _, cache = model.run_with_cache(toks)
        _, tl_cache = tl.run_with_cache(toks)
    assert isinstance(cache, ActivationCache)
    assert torch.equal(cache["resid_pre", 0], cache["blocks.0.hook_resid_pre"])
    assert torch.equal(cache["pattern", -1], cache["blocks.1.attn.hook_pattern"])
    assert torch.equal(cache["scale", 1, "ln2"], cache["blocks.1.ln2.hook_scale"])
    stack, labels = cache.accumulated_resid(apply_ln=True, incl_mid=True, return_labels=True)
    tl_stack, tl_labels = tl_cache.accumulated_resid(apply_ln=True, incl_mid=True, return_labels=True)
    assert labels == tl_labels and (stack - tl_stack).abs().max().item() <= TOL
    assert (cache.stack_activation("resid_post") - tl_cache.stack_activation("resid_post")).abs().max() <= TOL
    assert torch.equal(cache.apply_slice_to_batch_dim(1)["resid_mid", 1], cache["resid_mid", 1][1])
    _, plain = model.run_with_cache(toks, return_cache_object=False)
    assert type(plain) is dict and sorted(plain) == sorted(cache.keys())
    if residual == "full":  # additive: TL's decomposition and attribution are right, and agree with the export
        parts = cache.decompose_resid(apply_ln=True)
        assert (parts - tl_cache.decompose_resid(apply_ln=True)).abs().max().item() <= TOL
        attrs = cache.logit_attrs(cache.decompose_resid(), tokens=3)
        assert (attrs - tl_cache.logit_attrs(tl_cache.decompose_resid(), tokens=3)).abs().max().item() <= TOL
    else:  # not additive: refuse rather than answer wrongly
        for call in (cache.decompose_resid, cache.get_full_resid_decomposition):
            with pytest.raises(ToolkitError, match=f"residual='{residual}'.*interp.reading.decompose"):
                call()


def test_cfg_answers_transformer_lens_and_stays_a_model_config():
    model = make_model("random", residual="none")
    cfg = model.cfg
    assert (cfg.device, cfg.n_key_value_heads, cfg.normalization_type, cfg.d_vocab_out) == (
        torch.device("cpu"),
        None,
        "LN",
        len(CHARS),
    )
    assert cfg == interp.ModelConfig(**cfg.to_dict()) and "device" not in cfg.to_dict()
    model.to("meta")
    assert model.cfg.device == torch.device("meta")


@pytest.mark.parametrize("residual", RESIDUALS)
def test_transformer_lens_patching_runs_on_residual_gpt(residual):
    model = make_model("trained", residual=residual, self_bias=2.0)
    tl = convert(model)
    clean, corrupt = tokens(seed=1, batch=1, n=8), tokens(seed=2, batch=1, n=8)
    answer = int(clean[0, -1])

    def metric(logits):
        return logits[0, -1, answer]

    with torch.no_grad():
        _, cache = model.run_with_cache(clean)
        _, tl_cache = tl.run_with_cache(clean)
        for patch in (
            patching.get_act_patch_resid_pre,
            patching.get_act_patch_attn_head_out_all_pos,
            patching.get_act_patch_attn_head_pattern_all_pos,
        ):
            got = patch(model, corrupt, cache, metric)
            expected = patch(tl, corrupt, tl_cache, metric)
            assert got.shape == expected.shape and (got - expected).abs().max().item() <= TOL, patch.__name__
            assert got.abs().sum() > 0


@pytest.mark.parametrize("processing", [False, pytest.param(True, marks=tl3_only)])
@pytest.mark.parametrize("routing", ["bias0", "bias-inf", "uniform"])
@pytest.mark.parametrize("residual", RESIDUALS)
def test_save_and_load_round_trip_exactly(tmp_path, residual, routing, processing):
    mixer, self_bias = ROUTINGS[routing]
    model = make_model("trained", residual=residual, mixer=mixer, self_bias=self_bias, bias=processing)
    flags = dict(fold_ln=True, center_writing_weights=True, center_unembed=True) if processing else {}
    tl = convert(model, **flags)
    save, load = (interp.save_bridge, interp.load_bridge) if TL4 else (interp.save_hooked, interp.load_hooked)
    save(tl, tmp_path / "tl.pt")
    back = load(tmp_path / "tl.pt")
    toks = tokens(n=16)
    with torch.no_grad():
        logits, cache = tl.run_with_cache(toks)
        back_logits, back_cache = back.run_with_cache(toks)
    assert torch.equal(back_logits, logits)
    assert sorted(back_cache.keys()) == sorted(cache.keys())
    assert all(torch.equal(back_cache[k], cache[k]) for k in cache.keys())
    assert back.to_string(back.to_tokens("ROMEO:\n")[0]) == "ROMEO:\n"
    if TL4:
        assert back.residual_gpt.cfg == model.cfg
    else:
        assert back.cfg.normalization_type == tl.cfg.normalization_type
        assert back.cfg.residual_gpt_config == model.cfg.to_dict()


@tl3_only
@pytest.mark.parametrize("residual", RESIDUALS)
def test_plain_hooked_transformer_cannot_lose_the_wiring_silently(tmp_path, residual):
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    model = make_model("trained", residual=residual)
    tl = convert(model)
    assert f"residual={residual}" in tl.cfg.model_name and tl.cfg.residual_gpt_config["residual"] == residual
    torch.save(tl.state_dict(), tmp_path / "sd.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = HookedTransformer(tl.cfg)
    state = torch.load(tmp_path / "sd.pt")
    with pytest.raises(TypeError, match="residual_gpt_config"):
        HookedTransformerConfig.from_dict(tl.cfg.to_dict())
    if residual == "full":  # nothing rewired: the plain model is the same function
        plain.load_state_dict(state)
        assert (plain(tokens()) - tl(tokens())).abs().max().item() <= TOL
    else:
        with pytest.raises(RuntimeError, match="Unexpected key.*residual_removed"):
            plain.load_state_dict(state)


@tl3_only
def test_routing_is_in_the_state_dict():
    from transformer_lens import HookedTransformer

    tl = convert(make_model("random", self_bias=4.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = HookedTransformer(tl.cfg)
    with pytest.raises(RuntimeError, match="routing_self_bias"):
        plain.load_state_dict(tl.state_dict())


@tl3_only
def test_load_hooked_refuses_a_checkpoint(tmp_path):
    from interp import load_hooked

    save_checkpoint(tmp_path / "ckpt.pt", make_model("random"), vocab=CHARS)
    with pytest.raises(CheckpointError, match="to_hooked_transformer"):
        load_hooked(tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="no saved"):
        load_hooked(tmp_path / "missing.pt")


def _envoy(root, name: str):
    for part in name.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


@pytest.mark.parametrize("residual", RESIDUALS)
def test_nnsight_reads_and_edits_hook_points(residual):
    nnsight = pytest.importorskip("nnsight")
    model = make_model("trained", residual=residual)
    toks = tokens(batch=2, n=12)
    with torch.no_grad():
        logits, cache = model.run_with_cache(toks)
    traced = nnsight.NNsight(model)
    names = [
        "blocks.0.hook_resid_pre",
        "blocks.0.attn.hook_pattern",
        "blocks.0.hook_resid_mid",
        "blocks.1.attn.hook_z",
        "blocks.1.hook_resid_post",
    ]  # in execution order, as nnsight requires
    saved = []
    with torch.no_grad(), traced.trace(toks):
        for name in names:
            saved.append(_envoy(traced, name).output.save())
        out = traced.output.save()
    assert torch.equal(out, logits)
    for name, value in zip(names, saved, strict=True):
        assert (value - cache[name]).abs().max().item() <= TOL, name

    uniform = (torch.ones(12, 12).tril() / torch.arange(1, 13)[:, None]).expand(2, 4, 12, 12)
    with torch.no_grad(), traced.trace(toks):
        traced.blocks[0].attn.hook_pattern.output = uniform
        traced.blocks[1].hook_resid_mid.output[:] = 0
        edited = traced.output.save()
    hooks = [
        ("blocks.0.attn.hook_pattern", lambda p, hook: uniform),
        ("blocks.1.hook_resid_mid", lambda x, hook: torch.zeros_like(x)),
    ]
    with torch.no_grad():
        expected = model.run_with_hooks(toks, fwd_hooks=hooks)
    assert (edited - expected).abs().max().item() <= TOL
    assert (edited - logits).abs().max().item() > 0.1


def test_circuitsvis_on_a_cached_pattern():
    pytest.importorskip("circuitsvis")
    from interp.reading.interop import circuitsvis_patterns as attention_patterns
    from interp.reading.interop import offline_html

    model = make_model("random")
    text = "ROMEO:\nO me"
    _, cache = model.run_with_cache(torch.tensor([[CHARS.index(c) for c in text]]))
    html = attention_patterns(cache, 1, list(text))
    from offline import external_references

    for form in (html.local_src, str(html), html.show_code(), html._repr_html_()):  # every form: offline
        assert "AttentionPatterns" in form and not external_references(form)
    from circuitsvis.attention import attention_patterns as raw

    plain = raw(tokens=list(text), attention=cache["pattern", 1][0])
    assert external_references(str(plain))  # circuitsvis's own str() fetches its script: what offline_html fixes
    assert not external_references(str(offline_html(plain)))
    with pytest.raises(interp.ConfigError, match="positions"):
        attention_patterns(cache, 1, list(text[:-1]))
