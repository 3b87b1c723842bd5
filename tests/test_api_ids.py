"""Issue 46, token ids: an id outside the vocabulary is a TokenIdError (a ConfigError and an IndexError) naming the
argument - in train mode as in eval mode, in the codec, the unembedding and the export - never Python's negative
indexing (-1 as the last row) or torch's bare IndexError."""

from __future__ import annotations

import warnings

import pytest
import torch
from api_models import D_VOCAB, ids, refused, tiny_model
from majors import tl3_only

from interp.errors import ArgumentError, ConfigError, TokenIdError, UntrainedTokenWarning
from interp.model.vocab import checkpoint_char_codec
from interp.reading.decompose import direct_logit_attribution

CODEC_CHARS = list("abcdefghij")


@pytest.mark.parametrize("bad", [-1, D_VOCAB])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_forward_refuses_an_id_outside_the_vocabulary_in_either_mode(bad, mode):
    model = tiny_model(dropout=0.1)
    model.train(mode == "train")
    tokens = ids()
    tokens[1, 3] = bad
    error = refused(TokenIdError, "tokens", model, tokens)
    assert f"token id {bad}" in str(error) and isinstance(error, ConfigError) and isinstance(error, IndexError)


def test_generate_refuses_a_prompt_outside_the_vocabulary():
    refused(TokenIdError, "tokens (the prompt)", tiny_model().generate, torch.tensor([[1, -1]]), 2)


@pytest.mark.parametrize("bad", [[-1], [D_VOCAB], [0, 3, -2]])
def test_codec_decode_refuses_ids_outside_the_vocabulary(bad):
    codec = checkpoint_char_codec(CODEC_CHARS)
    error = refused(TokenIdError, "ids", codec.decode, bad)
    assert "outside the vocabulary (ids 0..9)" in str(error)


def test_codec_decode_refuses_what_is_not_ids_and_decodes_ids():
    codec = checkpoint_char_codec(CODEC_CHARS)
    for bad in (["a"], [1.0], [True], 3):
        refused(ArgumentError, "ids", codec.decode, bad)
    refused(ArgumentError, "text", codec.encode, 123)
    assert codec.decode([0, 9]) == "aj" and codec.decode(torch.tensor([1, 2])) == "bc"
    assert codec.pieces([3, 4]) == ["d", "e"]


@pytest.mark.parametrize("bad", [-1, D_VOCAB, [1, -1]])
def test_tokens_to_residual_directions_refuses_what_direct_logit_attribution_refuses(bad):
    model = tiny_model()
    refused(TokenIdError, "tokens", model.tokens_to_residual_directions, bad)
    _, cache = model.run_with_cache(ids())
    refused(TokenIdError, "tokens", direct_logit_attribution, cache, bad)
    assert torch.equal(model.tokens_to_residual_directions(D_VOCAB - 1), model.unembed.weight[D_VOCAB - 1])


def test_direct_logit_attribution_names_incorrect_tokens():
    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    refused(TokenIdError, "incorrect_tokens", direct_logit_attribution, cache, 1, -1)
    refused(TokenIdError, "tokens", direct_logit_attribution, cache, torch.tensor([[1.0]]))


@tl3_only
@pytest.mark.parametrize("bad", [-1, 66])
def test_the_export_refuses_ids_outside_its_embedding(bad):
    """TL would take W_E[-1] (the tokenizer's untrained special row) for -1, and fail past it."""
    from test_hooked import convert, make_model, tokens

    tl = convert(make_model("random"))
    t = tokens()
    t[0, 2] = bad
    for call in (tl, tl.run_with_cache, lambda x: tl.generate(x, max_new_tokens=1, verbose=False)):
        error = refused(TokenIdError, "tokens", call, t)
        assert "trained on ids 0..64" in str(error)


@tl3_only
def test_the_export_warns_for_its_special_row_before_the_text_not_for_padding_after_it():
    from test_hooked import convert, make_model, tokens

    tl = convert(make_model("random"))
    first = torch.cat([torch.tensor([[65]]), tokens(batch=1, n=4)], 1)
    with pytest.warns(UntrainedTokenWarning, match="tokens hold id"):
        tl(first)
    padded = tl.to_tokens(["ab\n", "abcd"])  # the shorter prompt padded with id 65 after its text
    assert padded[0, -1].item() == 65
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedTokenWarning)
        tl(padded)
        tl(padded.clone())  # the same ids built by hand: trailing padding is harmless under a causal mask


# ----------------------------------------------------------------------------------------------------------
# The fresh audit (issue 46): targets, patch indices, positions, plot indices


@pytest.mark.parametrize("bad", [D_VOCAB, -2])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_forward_refuses_a_target_outside_the_vocabulary_and_still_masks_minus_one(bad, mode):
    model = tiny_model()
    model.train(mode == "train")
    x, y = ids(), ids(seed=2)
    y[0, 2] = bad
    error = refused(TokenIdError, "targets", model, x, y)
    assert f"token id {bad}" in str(error)
    y[0, 2] = -1  # nanoGPT's ignore_index: masked, as before
    logits, loss = model(x, y)
    kept = y != -1
    assert loss.item() == pytest.approx(torch.nn.functional.cross_entropy(logits[kept], y[kept]).item(), abs=1e-6)


def test_per_sequence_loss_names_y_outside_the_vocabulary_and_masks_minus_one():
    from interp.reading.interventions import per_sequence_loss

    model, x, y = tiny_model(), ids(), ids(seed=2)
    bad = y.clone()
    bad[1, 0] = D_VOCAB
    refused(TokenIdError, "y", per_sequence_loss, model, x, bad)
    masked = y.clone()
    masked[:, :3] = -1  # the mean over each sequence's other positions, as the model's own loss reads -1
    ce, _ = per_sequence_loss(model, x, masked)
    expected = torch.nn.functional.cross_entropy(model(x)[:, 3:].transpose(1, 2), y[:, 3:], reduction="none").mean(1)
    assert torch.allclose(ce, expected, atol=1e-6)


@pytest.mark.parametrize("positions", [[-1, -1], [3, 8], [0.0, 1.0]], ids=["negative", "past the end", "floats"])
def test_per_sequence_loss_refuses_positions_outside_the_sequence(positions):
    from interp.reading.interventions import InterventionError, per_sequence_loss

    refused(
        InterventionError, "positions", per_sequence_loss, tiny_model(), ids(), ids(), positions=torch.tensor(positions)
    )


@pytest.mark.parametrize(
    "where,arg",
    [
        (dict(pos_index=torch.tensor([-1, -1])), "pos_index"),  # -1 would patch the last position silently
        (dict(pos_index=torch.tensor([8, 8])), "pos_index"),
        (dict(batch_index=torch.tensor([2]), pos_index=torch.tensor([0])), "batch_index"),
        (dict(head=-1), "head"),  # the last head, silently
        (dict(head=2), "head"),
    ],
    ids=["pos -1", "pos 8 of 8", "batch 2 of 2", "head -1", "head 2 of 2"],
)
def test_patch_refuses_an_index_outside_the_activation_it_patches(where, arg):
    from interp.reading.interventions import InterventionError, patch

    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    hooks = patch("blocks.0.attn.hook_z", cache["z", 0], **where)
    refused(InterventionError, arg, model.run_with_hooks, ids(seed=3), fwd_hooks=hooks)


@pytest.mark.parametrize(
    "where,arg",
    [(dict(batch=-1), "batch"), (dict(batch=2), "batch"), (dict(heads=[-1]), "heads"), (dict(heads=[2]), "heads")],
)
def test_attention_patterns_refuses_a_batch_row_or_head_it_does_not_have(where, arg):
    from interp.figures.plots import PlotInputError, attention_patterns

    _, cache = tiny_model().run_with_cache(ids())
    refused(PlotInputError, arg, attention_patterns, cache, list("abcdefgh"), layer=0, **where)
    fig = attention_patterns(cache, list("abcdefgh"), layer=0, batch=1, heads=[1])
    assert torch.equal(torch.as_tensor(fig.data[0].z), cache["pattern", 0][1, 1])
