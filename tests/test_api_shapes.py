"""Issue 46, shapes: a tensor of the wrong dims, length, dtype or device handed to the Python API is a ShapeError
(a ConfigError, a ValueError) whose message names the argument - never logits of another shape, never a traceback
from inside einops or cross-entropy."""

from __future__ import annotations

import pytest
import torch
from api_models import ids, refused, tiny_model
from majors import tl3_only

from interp.errors import ArgumentError, ConfigError, ShapeError
from interp.reading.decompose import logit_lens_ce
from interp.reading.interventions import per_sequence_loss
from interp.reading.scores import attention_scores, routing_bias


@pytest.mark.parametrize(
    "bad",
    [ids()[0], ids()[None], ids()[:, :0], ids().float()],
    ids=["1-D", "3-D", "no positions", "float"],
)
def test_forward_refuses_tokens_of_the_wrong_shape_or_dtype(bad):
    error = refused(ShapeError, "tokens", tiny_model(), bad)
    assert isinstance(error, ConfigError) and isinstance(error, ValueError)


def test_one_sequence_is_told_to_add_the_batch_dim():
    assert "tokens[None]" in str(refused(ShapeError, "tokens", tiny_model(), ids()[0]))


def test_forward_refuses_tokens_on_another_device_than_the_model():
    error = refused(ShapeError, "tokens", tiny_model().to("meta"), ids())
    assert "on cpu, the model on meta" in str(error)


def test_forward_refuses_a_sequence_past_n_ctx():
    assert "exceeds n_ctx 8" in str(refused(ShapeError, "tokens", tiny_model(), ids(n=9)))


def test_forward_refuses_text_or_a_list_by_name():
    for bad in ("abc", [[1, 2, 3]]):
        assert isinstance(refused(ArgumentError, "tokens", tiny_model(), bad), TypeError)


@pytest.mark.parametrize("bad", [ids()[:, :5], ids(batch=3), ids().float()], ids=["shorter", "more rows", "float"])
def test_forward_refuses_targets_that_do_not_match_tokens(bad):
    refused(ShapeError, "targets", tiny_model(), ids(), bad)


def test_matching_targets_give_the_loss():
    model, x = tiny_model(), ids()
    logits, loss = model(x, x)
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten())
    assert torch.allclose(loss, expected)


def test_attention_scores_refuses_more_queries_than_keys():
    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    refused(ShapeError, "q, k", attention_scores, model, cache["q", 0], cache["k", 0][:, :5])
    last = attention_scores(model, cache["q", 0][:, -5:], cache["k", 0])  # a kv cache: the last 5 queries
    assert torch.allclose(last, cache["attn_scores", 0][:, :, -5:])


@pytest.mark.parametrize(
    "which,change",
    [("q", lambda q: q[0]), ("k", lambda k: k[..., :3]), ("q", lambda q: q.long())],
    ids=["q 3-D", "k d_head", "q integer"],
)
def test_attention_scores_refuses_q_or_k_not_as_cached(which, change):
    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    q, k = cache["q", 0], cache["k", 0]
    q, k = (change(q), k) if which == "q" else (q, change(k))
    refused(ShapeError, which, attention_scores, model, q, k)


def test_routing_bias_refuses_a_size_that_is_not_a_positive_int():
    for bad in (0, 2.5, "4"):
        refused(ArgumentError, "n", routing_bias, tiny_model(self_bias=4.0), bad)


def test_remove_batch_dim_refuses_a_batch_of_two():
    """TransformerLens 3 would cache row 0 only without a word (TL 4 asserts): here, a ShapeError."""
    model = tiny_model()
    refused(ShapeError, "remove_batch_dim", model.run_with_cache, ids(batch=2), remove_batch_dim=True)
    _, one = model.run_with_cache(ids(batch=1), remove_batch_dim=True)
    _, whole = model.run_with_cache(ids(batch=1))
    assert torch.equal(one["blocks.0.hook_resid_post"], whole["blocks.0.hook_resid_post"][0])


@tl3_only
def test_the_export_refuses_remove_batch_dim_on_a_batch_of_two():
    from test_hooked import convert, make_model, tokens

    tl = convert(make_model("random"))
    refused(ShapeError, "remove_batch_dim", tl.run_with_cache, tokens(batch=2), remove_batch_dim=True)


def test_per_sequence_loss_refuses_inputs_and_targets_of_different_shapes():
    refused(ShapeError, "x, y", per_sequence_loss, tiny_model(), ids(), ids()[:, :5])


def test_logit_lens_refuses_targets_that_are_not_the_caches_positions():
    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    refused(ShapeError, "targets", logit_lens_ce, cache, ids()[:, :5])
    assert len(logit_lens_ce(cache, ids())["ce"]) == 3


@tl3_only
def test_an_export_of_a_model_on_the_meta_device_is_refused():
    from interp.tl.hooked import to_hooked_transformer

    refused(ShapeError, "source", to_hooked_transformer, tiny_model().to("meta"))


@tl3_only
def test_the_exports_generate_crops_a_text_prompt_longer_than_n_ctx_as_model_generate_does():
    from test_hooked import CHARS, convert, make_model

    model = make_model("random")
    model.vocab_state = {"vocab": CHARS}
    prompt = "ROMEO: what is it now, my lord?"  # 31 characters, n_ctx 16
    greedy = convert(model).generate(prompt, max_new_tokens=3, do_sample=False, verbose=False)
    assert greedy == model.generate(prompt, 3, temperature=0) and greedy.startswith(prompt)
