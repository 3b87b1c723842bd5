"""Issue 46, names: a hook name or names_filter that matches nothing, or names a layer the model lacks, is a
HookNameError (a ConfigError and a KeyError) naming the argument and the closest real names - never an empty or
partial cache without a word."""

from __future__ import annotations

import pytest
from api_models import ids, refused, tiny_model
from majors import tl3_only

from interp.errors import ArgumentError, ConfigError, HookNameError
from interp.reading.interventions import knock_out_self

TYPO = "blocks.0.hook_resid_psot"


@pytest.mark.parametrize(
    "names_filter",
    [TYPO, ["blocks.0.hook_resid_post", TYPO], ("blocks.1.hook_resid_pre", TYPO)],
    ids=["a typo", "a list with one typo", "a tuple with one typo"],
)
def test_run_with_cache_refuses_a_typo_naming_the_closest_names(names_filter):
    error = refused(HookNameError, "names_filter", tiny_model().run_with_cache, ids(), names_filter=names_filter)
    assert "closest: blocks.0.hook_resid_post" in str(error) and TYPO in str(error)
    assert isinstance(error, ConfigError) and isinstance(error, KeyError)


def test_run_with_cache_refuses_a_layer_the_model_lacks():
    run = tiny_model().run_with_cache
    error = refused(HookNameError, "names_filter", run, ids(), names_filter="blocks.5.hook_resid_pre")
    assert "layers 0..1" in str(error) and "blocks.1.hook_resid_pre" in str(error)


@pytest.mark.parametrize("names_filter", [lambda name: name.endswith("hook_resid_psot"), []], ids=["function", "[]"])
def test_run_with_cache_refuses_a_filter_that_matches_nothing(names_filter):
    refused(HookNameError, "names_filter", tiny_model().run_with_cache, ids(), names_filter=names_filter)


def test_a_names_filter_of_another_kind_is_refused():
    refused(ArgumentError, "names_filter", tiny_model().run_with_cache, ids(), names_filter=3)


def test_good_names_cache_exactly_those():
    model = tiny_model()
    names = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(ids(), names_filter=names)
    assert sorted(cache.keys()) == sorted(names)
    _, cache = model.run_with_cache(ids(), names_filter=lambda name: name.endswith("hook_mlp_out"))
    assert sorted(cache.keys()) == ["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"]


def test_run_with_hooks_and_hooks_refuse_a_typo_naming_the_closest_names():
    model = tiny_model()
    error = refused(HookNameError, "fwd_hooks", model.run_with_hooks, ids(), fwd_hooks=[(TYPO, lambda x, hook: x)])
    assert "closest: blocks.0.hook_resid_post" in str(error)
    with pytest.raises(HookNameError, match=r"bwd_hooks: .*matches no hook point"):
        with model.hooks(bwd_hooks=[(lambda name: False, lambda g, hook: None)]):
            pass
    error = refused(HookNameError, "fwd_hooks", model.run_with_hooks, ids(), fwd_hooks=knock_out_self(9))
    assert "layers 0..1" in str(error)


def test_add_hook_refuses_a_typo_and_nothing_is_left_hooked():
    model = tiny_model()
    refused(HookNameError, "name", model.add_hook, TYPO, lambda x, hook: x)
    assert not model._any_hook()


@tl3_only
def test_the_export_refuses_a_typo_in_names_filter_and_fwd_hooks():
    from test_hooked import convert, make_model, tokens

    tl = convert(make_model("random"))
    error = refused(HookNameError, "names_filter", tl.run_with_cache, tokens(), names_filter=[TYPO])
    assert "closest: blocks.0.hook_resid_post" in str(error)
    refused(HookNameError, "fwd_hooks", tl.run_with_hooks, tokens(), fwd_hooks=[(TYPO, lambda x, hook: x)])


@pytest.mark.parametrize("key", ["blocks.0.hook_resid_psot", ("resid_pre", 5)], ids=["typo", "layer"])
def test_a_cache_asked_for_a_name_it_lacks_names_the_closest(key):
    _, cache = tiny_model().run_with_cache(ids())
    error = refused(HookNameError, "cache", cache.__getitem__, key)
    assert "closest: blocks." in str(error) and isinstance(error, KeyError)
    assert cache["resid_pre", 1].shape == (2, 8, 16)


@tl3_only
def test_the_exports_cache_names_the_closest_too():
    from test_hooked import convert, make_model, tokens

    _, cache = convert(make_model("random")).run_with_cache(tokens())
    assert "closest: blocks.0.hook_resid_post" in str(refused(HookNameError, "cache", cache.__getitem__, TYPO))
