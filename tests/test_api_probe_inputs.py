"""Issue 46, probes' and interventions' inputs: empty or wrong batches, patterns, values and token arguments are a
ToolkitError naming the argument (ArgumentError is also a TypeError, ShapeError a ValueError) - never a
ZeroDivisionError, an unpack error or an expand error from inside; and frozen parameters are measured, not
refused with torch's "does not require grad"."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from api_models import ids, refused, tiny_model
from majors import export, tl3_only

from interp.errors import ArgumentError, ShapeError
from interp.reading.decompose import decompose, direct_logit_attribution, logit_lens_over
from interp.reading.interventions import InterventionError, ablate_heads, head_means, patch
from probes import attention_stats, hidden_norms, measure, pattern_stats
from probes.identity import IdentityProbeError, measure_identity


@pytest.mark.parametrize("probe", [hidden_norms, attention_stats, head_means], ids=lambda f: f.__name__)
def test_probes_refuse_no_batches_by_name(probe):
    assert isinstance(refused(ArgumentError, "batches", probe, tiny_model(), []), TypeError)


@pytest.mark.parametrize(
    "bad,error",
    [("abc", ArgumentError), ([(ids(), ids()[:, :3])], ShapeError), ([ids()[0, :1]], ShapeError), ([3], ArgumentError)],
    ids=["a string", "x and y differ", "one position", "a number"],
)
def test_probes_refuse_batches_of_the_wrong_kind(bad, error):
    refused(error, "batches", hidden_norms, tiny_model(), bad)
    refused(error, "batches", measure, tiny_model(), bad)


PATTERN_CHANGES = {"3-D": lambda p: p[0], "not square": lambda p: p[..., :5], "one position": lambda p: p[..., :1, :1]}


@pytest.mark.parametrize("change", list(PATTERN_CHANGES.values()), ids=list(PATTERN_CHANGES))
def test_pattern_stats_refuses_a_pattern_not_as_hook_pattern_holds_it(change):
    _, cache = tiny_model().run_with_cache(ids())
    refused(ShapeError, "pattern", pattern_stats, change(cache["pattern", 0]))


def test_measure_reads_the_gradients_of_frozen_parameters_and_leaves_them_frozen():
    model, batch = tiny_model(), ids()
    free = measure(model, batch)["gradients"]
    for p in model.parameters():
        p.requires_grad_(False)
    frozen = measure(model, batch)["gradients"]
    assert frozen["total"] == pytest.approx(free["total"], rel=1e-5) and frozen["total"] > 0
    assert frozen["resid"] == pytest.approx(free["resid"], rel=1e-5)
    assert not any(p.requires_grad for p in model.parameters())
    with torch.no_grad():  # inside a no_grad block too
        assert measure(model, batch)["gradients"]["total"] == pytest.approx(free["total"], rel=1e-5)


def test_measure_identity_names_train_tokens_and_val_batches():
    model = tiny_model()
    long_enough = np.arange(200) % 10
    refused(IdentityProbeError, "train_tokens", measure_identity, model, [1, 2, 3], ids(), max_iter=2)
    refused(ArgumentError, "val_batches", measure_identity, model, long_enough, [], max_iter=2)
    refused(ArgumentError, "val_batches", measure_identity, model, long_enough, "abc", max_iter=2)


def test_direct_logit_attribution_refuses_a_string_for_tokens():
    _, cache = tiny_model().run_with_cache(ids())
    assert isinstance(refused(ArgumentError, "tokens", direct_logit_attribution, cache, "a"), TypeError)


def test_ablate_heads_refuses_a_value_of_another_shape_or_heads_that_are_not_indices():
    model = tiny_model()
    hooks = ablate_heads(0, 0, value=torch.zeros(3))
    refused(InterventionError, "value", model.run_with_hooks, ids(), fwd_hooks=hooks)
    refused(InterventionError, "value", ablate_heads, 0, 0, value=torch.zeros(2, 2, 8))
    refused(InterventionError, "heads", ablate_heads, 0, "0")
    refused(InterventionError, "heads", ablate_heads, 0, [])
    d_head = model.cfg.d_head
    by_value = model.run_with_hooks(ids(), fwd_hooks=ablate_heads(0, 1, value=torch.zeros(d_head)))
    assert torch.equal(by_value, model.run_with_hooks(ids(), fwd_hooks=ablate_heads(0, 1)))


@tl3_only
def test_an_export_of_a_meta_model_names_the_meta_device():
    from interp.tl.hooked import to_hooked_transformer

    assert "meta device" in str(refused(ShapeError, "source", to_hooked_transformer, tiny_model().to("meta")))


def test_patch_refuses_index_tensors_that_do_not_pair_up():
    source = torch.zeros(2, 8, 16)
    name = "blocks.0.hook_resid_post"
    refused(InterventionError, "batch_index", patch, name, source, torch.tensor([0, 1]), torch.tensor([3]))
    refused(InterventionError, "pos_index", patch, name, source, None, torch.tensor([[3]]))
    refused(InterventionError, "batch_index", patch, name, source, torch.tensor([0]))
    refused(InterventionError, "source", patch, name, [0.0])
    refused(InterventionError, "head", patch, "blocks.0.attn.hook_z", torch.zeros(2, 8, 2, 8), None, None, "0")


def test_logit_lens_over_refuses_batches_that_are_not_pairs():
    refused(ArgumentError, "batches", logit_lens_over, tiny_model(), [])
    assert len(logit_lens_over(tiny_model(), [(ids()[:, :-1], ids()[:, 1:])])["ce"]) == 3


def test_decompose_names_a_cache_or_site_of_the_wrong_kind():
    model = tiny_model()
    _, cache = model.run_with_cache(ids())
    refused(ArgumentError, "site", decompose, cache, 3)
    for bad in (None, [1, 2]):
        refused(ArgumentError, "cache", decompose, bad, "final", model)


# ----------------------------------------------------------------------------------------------------------
# The fresh audit (issue 46): batches of two lengths, every batch's gradients, identity decoders' inputs


def test_attention_stats_over_batches_of_two_lengths_counts_every_query_position_once():
    uniform = tiny_model(mixer="uniform")  # alpha_tt is 1/(t+1) at every position: the ratio must be 1 exactly
    stats = attention_stats(uniform, [ids(n=4), ids(n=8)])  # token tensors: 3 and 7 positions
    assert stats["alpha_tt_ratio"] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert stats["uniform_baseline"] == pytest.approx(
        (2 * 2 * (1 / 2 + 1 / 3) / 2 + 2 * 6 * sum(1 / (t + 1) for t in range(1, 7)) / 6) / (2 * 2 + 2 * 6)
    )


def test_measure_reads_the_gradients_of_every_batch_not_the_first():
    from probes import gradient_flow

    model, x, y = tiny_model(), ids(n=8), ids(n=8, seed=2)
    whole = gradient_flow(model, x, y)
    assert measure(model, [(x[:1], y[:1]), (x[1:], y[1:])])["gradients"] == whole  # one length: concatenated
    # two lengths: the short batch padded with masked targets, the mean loss over all 8 + 4 tokens
    ragged = measure(model, [(x[:1], y[:1]), (x[1:, :4], y[1:, :4])])["gradients"]
    logits = torch.cat([model(x[:1])[0], model(x[1:, :4])[0]])
    expected = torch.nn.functional.cross_entropy(logits, torch.cat([y[0], y[1, :4]]))
    assert ragged["loss"] == pytest.approx(expected.item(), abs=1e-6)


def test_identity_probes_refuse_float_train_tokens_unknown_sites_and_acts_of_another_width():
    from probes.decoders import fit_decoders

    model = tiny_model()
    tokens = np.arange(400) % 10
    refused(IdentityProbeError, "train_tokens", measure_identity, model, tokens / 10, [ids()], n_train_windows=4)
    refused(IdentityProbeError, "sites", fit_decoders, model, tokens, ["blocks.0.hook_resid_psot"], n_train_windows=4)
    decoders = fit_decoders(model, tokens, ["blocks.1.hook_resid_post"], n_train_windows=4, max_iter=5)
    refused(
        IdentityProbeError, "acts", decoders.per_sequence_ce, "blocks.1.hook_resid_post", torch.zeros(2, 8, 32), ids()
    )


@pytest.mark.parametrize("probe", [hidden_norms, attention_stats, measure], ids=lambda f: f.__name__)
def test_probes_refuse_a_model_on_the_meta_device_by_name(probe):
    refused(ShapeError, "model", probe, tiny_model().to("meta"), [ids()])


@tl3_only
def test_gradient_flow_reads_the_export_as_the_model_it_came_from():
    from probes import gradient_flow

    model, x, y = tiny_model(), ids(), ids(seed=2)
    y[0, :2] = -1  # masked in both
    ours, theirs = gradient_flow(model, x, y), gradient_flow(export(model, vocab=list("abcdefghij")), x, y)
    assert theirs["loss"] == pytest.approx(ours["loss"], abs=1e-6) and ours["loss"] == pytest.approx(
        model(x, y)[1].item()
    )
    assert theirs["resid"] == pytest.approx(ours["resid"], rel=1e-4)
