"""Issue 46, token ids: an id outside the vocabulary is a TokenIdError (a ConfigError and an IndexError) naming the
argument - in train mode as in eval mode, in the codec, the unembedding and the export - never Python's negative
indexing (-1 as the last row) or torch's bare IndexError."""

from __future__ import annotations

import warnings

import pytest
import torch
from api_models import D_VOCAB, ids, refused, tiny_model
from majors import tl3_only

from interp.decompose import direct_logit_attribution
from interp.errors import ArgumentError, ConfigError, TokenIdError, UntrainedTokenWarning
from interp.vocab import checkpoint_char_codec

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
