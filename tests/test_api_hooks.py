"""Issue 46, hooks: what a user's forward hook returns is checked - None, or a tensor of the shape, dtype and device
it received - else a HookReturnError naming the hook function and the hook point; never a smaller tensor broadcast
into the stream or shortening the logits without a word."""

from __future__ import annotations

import pytest
import torch
from api_models import ids, refused, tiny_model
from majors import tl3_only

from interp.errors import ArgumentError, HookReturnError


def keep_first_feature(x, hook):
    return x[..., :1]


def keep_first_position(x, hook):
    return x[:, :1]


def as_double(x, hook):
    return x.double()


def as_number(x, hook):
    return 0.0


BAD_HOOKS = {
    "x[..., :1] on hook_attn_out": ("blocks.0.hook_attn_out", keep_first_feature),
    "x[:, :1] on hook_resid_pre": ("blocks.1.hook_resid_pre", keep_first_position),
    "x.double() on hook_mlp_out": ("blocks.0.hook_mlp_out", as_double),
    "a number on attn.hook_pattern": ("blocks.1.attn.hook_pattern", as_number),
}


@pytest.mark.parametrize("case", list(BAD_HOOKS))
def test_run_with_hooks_refuses_a_hook_that_returns_another_shape_or_dtype(case):
    name, fn = BAD_HOOKS[case]
    error = refused(HookReturnError, f"hook {fn.__name__}", tiny_model().run_with_hooks, ids(), fwd_hooks=[(name, fn)])
    assert f"on {name} returned" in str(error) and isinstance(error, ValueError)


@pytest.mark.parametrize("case", list(BAD_HOOKS))
def test_hooks_context_add_hook_and_run_with_cache_check_the_return_too(case):
    name, fn = BAD_HOOKS[case]
    model = tiny_model()
    with model.hooks(fwd_hooks=[(name, fn)]):
        refused(HookReturnError, f"hook {fn.__name__}", model, ids())
        refused(HookReturnError, f"hook {fn.__name__}", model.run_with_cache, ids())
    model.add_hook(name, fn)
    refused(HookReturnError, f"hook {fn.__name__}", model, ids())
    model.reset_hooks()
    model(ids())  # the hook is gone


def test_a_hook_that_returns_none_x_or_an_edited_tensor_of_its_shape_is_applied():
    model = tiny_model()
    plain = model(ids())
    for fn in (lambda x, hook: None, lambda x, hook: x, lambda x, hook: x.clone()):
        assert torch.equal(model.run_with_hooks(ids(), fwd_hooks=[("blocks.0.hook_attn_out", fn)]), plain)

    def zero(x, hook):
        return torch.zeros_like(x)

    zeroed = model.run_with_hooks(ids(), fwd_hooks=[("blocks.0.hook_attn_out", zero)])
    by_hand = model.run_with_hooks(ids(), fwd_hooks=[("blocks.0.hook_attn_out", lambda x, hook: x * 0)])
    assert torch.equal(zeroed, by_hand) and not torch.equal(zeroed, plain)


def test_a_filter_function_hook_names_the_point_it_failed_on():
    error = refused(
        HookReturnError,
        "hook keep_first_position",
        tiny_model().run_with_hooks,
        ids(),
        fwd_hooks=[(lambda name: name.endswith("hook_resid_post"), keep_first_position)],
    )
    assert "on blocks.0.hook_resid_post returned" in str(error)


@tl3_only
@pytest.mark.parametrize("case", list(BAD_HOOKS))
def test_the_export_refuses_the_same_hooks(case):
    from test_hooked import convert, make_model, tokens

    name, fn = BAD_HOOKS[case]
    tl = convert(make_model("random"))
    refused(HookReturnError, f"hook {fn.__name__}", tl.run_with_hooks, tokens(), fwd_hooks=[(name, fn)])
    tl(tokens())  # nothing left hooked


@pytest.mark.parametrize(
    "fwd_hooks,words",
    [([("blocks.0.hook_resid_post", "x")], "fwd_hooks[0]: the hook"), (["blocks.0.hook_resid_post"], "fwd_hooks[0]")],
    ids=["not callable", "not a pair"],
)
def test_hooks_that_are_not_name_function_pairs_are_refused_before_the_forward(fwd_hooks, words):
    error = refused(ArgumentError, "fwd_hooks", tiny_model().run_with_hooks, ids(), fwd_hooks=fwd_hooks)
    assert str(error).startswith(words) and isinstance(error, TypeError)


def test_hooks_given_as_a_generator_are_all_added():
    model, seen = tiny_model(), []
    pairs = ((f"blocks.{layer}.hook_resid_post", lambda x, hook: seen.append(hook.name)) for layer in range(2))
    model.run_with_hooks(ids(), fwd_hooks=pairs)
    assert seen == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
