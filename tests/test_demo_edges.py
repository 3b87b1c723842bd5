"""Where a TransformerLens demo's habit met the export at its edges (audit of issue 52): a bias=True model's
b_U in the Exploratory recipe, TL's weight processing folding value biases after the export, BOS, a padded
batch's loss, the cache's shorthand names, tokens on the meta device. Each on the installed major (the 3.x
export, or the TL 4 bridge under make test-tl4), every number against ResidualGPT itself.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from edge_models import CHARS, counted, exported, ids, model_with, v_ablated_loss
from majors import TL4, tl3_only

from interp.errors import (
    HookNameError,
    ShapeError,
    TokenIdError,
    ToolkitError,
    UnembedBiasWarning,
    UntrainedTokenWarning,
    ValueBiasWarning,
)
from interp.reading.decompose import direct_logit_attribution

TEXTS = ["First Citizen", "Before we"]


# --------------------------------------------------------------------------- b_U (a bias=True model)


@tl3_only
def test_recipe_on_a_bias_model_warns_for_b_U_at_every_call_and_the_named_fix_is_exact():
    model = model_with(bias=True, tie_embeddings=False)
    tl = exported(model)
    assert bool(tl.b_U.ne(0).any())  # fold_ln moved ln_final.b there
    toks = torch.randint(0, len(CHARS), (4, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(toks)[:, -1]
        _, cache = tl.run_with_cache(toks)
    a, b = logits.topk(2, -1).indices.T
    true = logits.gather(1, a[:, None])[:, 0] - logits.gather(1, b[:, None])[:, 0]

    def recipe():
        dirs = tl.tokens_to_residual_directions(a) - tl.tokens_to_residual_directions(b)
        scaled = cache.apply_ln_to_stack(cache["resid_post", -1][:, -1], layer=-1, pos_slice=-1)
        return (scaled * dirs).sum(-1)

    calls = {
        "tokens_to_residual_directions": lambda: tl.tokens_to_residual_directions(a),
        "apply_ln_to_stack": lambda: cache.apply_ln_to_stack(cache["resid_post", -1], layer=-1),
        "accumulated_resid (logit lens)": lambda: cache.accumulated_resid(apply_ln=True, pos_slice=-1),
        "decompose_resid": lambda: cache.decompose_resid(apply_ln=True, pos_slice=-1),
    }
    for what, call in calls.items():
        assert counted(UnembedBiasWarning, call) == 2, what
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = recipe()
        lens = cache.accumulated_resid(apply_ln=True, pos_slice=-1)[-1]
        lens_ld = (lens * (tl.W_U[:, a] - tl.W_U[:, b]).T).sum(-1)
    gap = tl.b_U[a] - tl.b_U[b]
    assert (got - true).abs().max() > 1e-2  # what the warning is about: b_U[a] - b_U[b] is missing
    torch.testing.assert_close(got + gap, true, rtol=0, atol=1e-4)  # the fix it names
    torch.testing.assert_close(lens_ld + gap, true, rtol=0, atol=1e-4)
    attribution = direct_logit_attribution(cache, a[:, None].expand(-1, 12), b[:, None].expand(-1, 12), tl)
    torch.testing.assert_close(attribution.values.sum(0)[:, -1], true, rtol=0, atol=1e-4)


@tl3_only
def test_no_b_U_warning_where_b_U_is_zero():
    tl = exported(model_with(bias=False))
    assert not bool(tl.b_U.ne(0).any())
    with torch.no_grad():
        _, cache = tl.run_with_cache(ids("First"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnembedBiasWarning)
        tl.tokens_to_residual_directions(torch.tensor([3]))
        cache.apply_ln_to_stack(cache["resid_post", -1], layer=-1)


# --------------------------------------------------------------------------- value biases folded after the export


@tl3_only
def test_processing_that_folds_value_biases_warns_at_every_call():
    model = model_with(bias=True)
    toks = ids("First Citizen:\n")
    tl = exported(model)
    assert abs(v_ablated_loss(tl, toks) - v_ablated_loss(model, toks)) < 1e-5  # as exported: b_V where it was
    assert counted(ValueBiasWarning, tl.process_weights_, 1) == 1  # TL's default inside: fold_value_biases=True
    assert abs(v_ablated_loss(tl, toks) - v_ablated_loss(model, toks)) > 1e-4  # what the warning says
    again = exported(model)
    assert counted(ValueBiasWarning, lambda: again.load_and_process_state_dict(again.state_dict()), 1) == 1
    kept = exported(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueBiasWarning)
        kept.load_and_process_state_dict(kept.state_dict(), fold_value_biases=False)  # the fix it names
    assert abs(v_ablated_loss(kept, toks) - v_ablated_loss(model, toks)) < 1e-5
    import interp

    opt_in = lambda: interp.to_hooked_transformer(model, vocab=CHARS, fold_value_biases=True)  # noqa: E731
    assert counted(ValueBiasWarning, opt_in, 1) == 1
    no_bias = exported(model_with(bias=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueBiasWarning)
        no_bias.process_weights_()  # nothing to move: no word


# --------------------------------------------------------------------------- BOS and the untrained id


def test_bos_and_the_untrained_id_warn_alike_on_both_majors():
    tl = exported(model_with(bias=False))
    bos = len(CHARS)  # <|endoftext|>: the tokenizer's id after the trained ones
    calls = {
        "to_tokens(prepend_bos=True)": lambda: tl.to_tokens("First", prepend_bos=True),
        "forward(text, prepend_bos=True)": lambda: tl("First", prepend_bos=True),
        "tokens with the id first": lambda: tl(torch.cat([torch.tensor([[bos]]), ids("First")], 1)),
    }
    for what, call in calls.items():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        hits = [w for w in seen if issubclass(w.category, UntrainedTokenWarning)]
        assert hits and all(w.filename == __file__ for w in hits), what
    with warnings.catch_warnings():  # padding after the text, as to_tokens pads a list: harmless, no word
        warnings.simplefilter("error", UntrainedTokenWarning)
        tl(TEXTS)
        tl(tl.to_tokens(TEXTS))


# --------------------------------------------------------------------------- a padded batch's loss


def test_padded_batch_loss_is_the_mean_over_real_targets():
    model = model_with(bias=False)
    tl = exported(model)
    per_text = []
    with torch.no_grad():
        for text in TEXTS:
            t = ids(text)
            per_text.append(-model(t).log_softmax(-1)[0, :-1].gather(-1, t[0, 1:, None])[:, 0])
        loss = tl(TEXTS, return_type="loss")
        per_token = tl(TEXTS, return_type="loss", loss_per_token=True)
    assert abs(loss.item() - torch.cat(per_text).mean().item()) < 1e-5
    assert per_token.shape == (2, len(TEXTS[0]) - 1)
    torch.testing.assert_close(per_token[1, : len(TEXTS[1]) - 1], per_text[1], rtol=0, atol=1e-5)
    assert bool((per_token[1, len(TEXTS[1]) - 1 :] == 0).all())  # padding scores nothing, as under TL's mask
    inside = torch.cat([ids("First"), torch.tensor([[len(CHARS)]]), ids("Cit")], 1)  # the id as a real target
    with pytest.raises(TokenIdError, match="no logit"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTokenWarning)
        tl(inside, return_type="loss")


# --------------------------------------------------------------------------- the cache's shorthand


def test_cache_shorthand_follows_transformer_lens_names():
    tl = exported(model_with(bias=False))
    with torch.no_grad():
        _, cache = tl.run_with_cache(ids("First"))
    for short, name in (
        (("pre", 0), "blocks.0.mlp.hook_pre"),
        (("post", -1), "blocks.1.mlp.hook_post"),
        (("pattern", 1), "blocks.1.attn.hook_pattern"),
        (("scale", 0, "ln1"), "blocks.0.ln1.hook_scale"),
        (("resid_pre", 0), "blocks.0.hook_resid_pre"),
    ):
        assert torch.equal(cache[short], cache[name]), short
    with pytest.raises(HookNameError, match="blocks.1.attn.hook_attn_scores"):  # 'scores' is not TL shorthand
        cache["scores", 1]


@pytest.mark.skipif(not TL4, reason="the bridge's position-blind mixer (test_bridge.py has the rest)")
def test_bridge_cache_names_the_hook_a_position_blind_model_lacks():
    tl = exported(model_with(bias=False, residual="attn_only", mixer="position_blind"))
    with torch.no_grad():
        _, cache = tl.run_with_cache(ids("First"))
    assert torch.equal(cache["post", 0], cache["blocks.0.mlp.hook_post"])
    with pytest.raises(ToolkitError, match="position_blind") as caught:
        cache["pattern", 0]
    assert "blocks.0.attn.hook_pattern" in str(caught.value) and "{l}" not in str(caught.value).split(":")[0]


# --------------------------------------------------------------------------- the meta device


def test_meta_tokens_are_one_line():
    tl = exported(model_with(bias=False))
    with pytest.raises(ShapeError, match="meta"):
        tl(torch.zeros(1, 4, dtype=torch.long, device="meta"))


# --------------------------------------------------------------------------- left padding, weights alone


@tl3_only
def test_left_padding_unmasked_warns_at_every_call_and_masked_is_exact():
    """Audit 52b A: to_tokens(padding_side="left") then a call without padding_side="left" attended to the pads
    with no word (0.906 in log-probs). It warns at every call; with the option the call is exact."""
    model = model_with(bias=False)
    tl = exported(model)
    tokens = tl.to_tokens(TEXTS, padding_side="left")
    assert counted(UntrainedTokenWarning, lambda: tl(tokens)) == 2
    assert counted(UntrainedTokenWarning, lambda: tl.run_with_cache(tokens)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedTokenWarning)  # masked: nothing to say
        masked = tl(tokens, padding_side="left").log_softmax(-1)
        right = tl(tl.to_tokens(TEXTS)).log_softmax(-1)  # right padding (the default) needs no mask
    with torch.no_grad():
        short = model(ids(TEXTS[1])).log_softmax(-1)[0, -1]
    torch.testing.assert_close(masked[1, -1], short, rtol=0, atol=1e-4)
    torch.testing.assert_close(right[1, len(TEXTS[1]) - 1], short, rtol=0, atol=1e-4)


@tl3_only
def test_a_rewired_exports_weights_alone_warn_at_every_load_at_the_users_line():
    """Audit 52b B: the WeightsOnlyWarning was attributed to torch's line, so Python showed it once a session."""
    from transformer_lens import HookedTransformer

    from interp.errors import WeightsOnlyWarning

    tl = exported(model_with(bias=False, residual="attn_only"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(2):
            HookedTransformer(tl.cfg).load_state_dict(tl.state_dict(), strict=False)
    said = [w for w in seen if issubclass(w.category, WeightsOnlyWarning)]
    assert len(said) == 2 and all(w.filename == __file__ for w in said), [(w.filename, w.lineno) for w in said]


def test_left_padding_is_refused_by_the_bridge_and_a_mask_that_keeps_the_pads_warns_on_the_export():
    """Audit 52c: on the bridge a left-padded to_tokens batch ran 0.31 off with no word (ResidualGPT has no
    position offsets); on the 3.x export an all-ones attention_mask and generate(tokens) without
    padding_side='left' turned the warning off."""
    model = model_with(bias=False, residual="attn_only")
    tl = exported(model)
    if TL4:
        with pytest.raises(ToolkitError, match="padded on the left"):
            tl.to_tokens(TEXTS, padding_side="left")
        return
    tokens = tl.to_tokens(TEXTS, padding_side="left")
    ones = torch.ones_like(tokens)
    assert counted(UntrainedTokenWarning, lambda: tl(tokens, attention_mask=ones)) == 2
    right = (tokens < len(CHARS)).long()  # the mask TL would build for left padding
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedTokenWarning)
        masked = tl(tokens, attention_mask=right).log_softmax(-1)
    with torch.no_grad():
        short = model(ids(TEXTS[1])).log_softmax(-1)[0, -1]
    torch.testing.assert_close(masked[1, -1], short, rtol=0, atol=1e-4)
    generate = lambda: tl.generate(tokens, max_new_tokens=2, do_sample=False, verbose=False)  # noqa: E731
    assert counted(UntrainedTokenWarning, generate, times=1) >= 1


def test_generate_on_right_padded_tokens_warns_at_every_call_and_strings_are_exact():
    """to_tokens pads a list on the right; generate on those tokens appended after the pads, so the shorter
    prompt went on from its padding at shifted positions, silently. Now it warns at every call, on both majors;
    a list of strings (each prompt alone, or left-padded and masked) is ResidualGPT's greedy continuation."""
    model = model_with(bias=False, residual="attn_only")
    tl = exported(model)
    tokens = tl.to_tokens(TEXTS)
    assert bool((tokens[1] >= len(CHARS)).any())  # the shorter prompt is padded after its text
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(2):
            tl.generate(tokens, max_new_tokens=2, do_sample=False, verbose=False)
    said = [w for w in seen if issubclass(w.category, UntrainedTokenWarning) and "row(s) 1 " in str(w.message)]
    assert len(said) == 2 and all(w.filename == __file__ for w in said)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedTokenWarning)  # rows that end in text say nothing
        tl.generate(tokens[:1], max_new_tokens=2, do_sample=False, verbose=False)
        texts = tl.generate(TEXTS, max_new_tokens=3, do_sample=False, verbose=False)
    for prompt, got in zip(TEXTS, texts, strict=True):
        with torch.no_grad():
            greedy = model.generate(ids(prompt), 3, temperature=0.0)[0]
        assert got == "".join(CHARS[i] for i in greedy)
