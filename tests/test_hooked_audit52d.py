"""Audit 52d on the 3.x export (and, where the fix is shared, the TL 4 bridge): TransformerLens habits that answered
another model's question without a word. Ground truth is ResidualGPT itself."""

from __future__ import annotations

import warnings

import pytest
import torch
from edge_models import CHARS, counted, exported, ids, model_with, v_ablated_loss
from majors import TL4, tl3_only

from interp import ResidualGPT
from interp.errors import ToolkitError

# --------------------------------------------------------------------------- 1, 2: sums on a removed residual


def _neurons_reach_nothing(model: ResidualGPT) -> torch.Tensor:
    """attn_only: no FFN skip, so the final stream is the last block's mlp_out; an earlier neuron's direct share
    is 0. Returns what stack_neuron_results gives layer 0's neurons (|.| summed), to show it is not."""
    tl = exported(model)
    _, cache = tl.run_with_cache(ids("First Citizen"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stack = cache.stack_neuron_results(layer=model.cfg.n_layers, pos_slice=-1, apply_ln=False)
    return stack[: model.cfg.d_mlp].abs().sum()


def test_stack_neuron_results_on_a_removed_residual_warns_at_every_call_or_is_refused():
    """Audit 52d B07: per-neuron DLA gave layer-0 neurons +1.14 on attn_only, with no word."""
    model = model_with(bias=False, residual="attn_only", n_layers=3)
    if not TL4:  # the bridge refuses the call
        assert _neurons_reach_nothing(model) > 0.1  # what the warning is about
    tl = exported(model)
    _, cache = tl.run_with_cache(ids("First Citizen"))
    from transformer_lens import ActivationCache

    by_hand = ActivationCache(dict(cache.cache_dict), tl)
    for c in (cache, by_hand):
        call = lambda: c.stack_neuron_results(layer=2, pos_slice=-1, apply_ln=False)  # noqa: E731
        if TL4:
            with pytest.raises(ToolkitError, match="stack_neuron_results"):
                call()
        else:
            from interp.tl.hooked import NonAdditiveResidualWarning

            assert counted(NonAdditiveResidualWarning, call) == 2


@tl3_only
def test_stack_neuron_results_on_a_full_residual_says_nothing():
    from interp.tl.hooked import NonAdditiveResidualWarning

    tl = exported(model_with(bias=False, n_layers=3))
    _, cache = tl.run_with_cache(ids("First Citizen"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonAdditiveResidualWarning)
        cache.stack_neuron_results(layer=2, pos_slice=-1, apply_ln=False)
        tl.accumulated_bias(2)


@tl3_only
def test_accumulated_bias_on_a_removed_residual_warns_at_every_call():
    """Audit 52d B12: accumulated_bias(2) summed b_O and b_out of layers 0-1; only block 1's b_out reaches block 2."""
    from interp.tl.hooked import NonAdditiveResidualWarning

    model = model_with(bias=True, residual="attn_only", n_layers=3)
    tl = exported(model, fold_ln=False, center_writing_weights=False, center_unembed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gap = (tl.accumulated_bias(2) - tl.blocks[1].mlp.b_out).abs().max().item()
    assert gap > 0.1  # what the warning is about
    assert counted(NonAdditiveResidualWarning, lambda: tl.accumulated_bias(2)) == 2
    assert counted(NonAdditiveResidualWarning, lambda: tl.accumulated_bias(1, mlp_input=True)) == 2
    _, cache = tl.run_with_cache(ids("First"))
    with warnings.catch_warnings(record=True) as seen:  # get_full_resid_decomposition reads it: one word, not two
        warnings.simplefilter("always")
        cache.get_full_resid_decomposition(layer=2, expand_neurons=False)
    said = [str(w.message) for w in seen if issubclass(w.category, NonAdditiveResidualWarning)]
    assert len(said) == 1 and "get_full_resid_decomposition" in said[0], said


# --------------------------------------------------------------------------- 3: ids outside the vocabulary


@tl3_only
@pytest.mark.parametrize("tokens", [-1, [3, -1], torch.tensor([3, -1]), torch.tensor(-1), 65, "<|endoftext|>"])
def test_residual_directions_of_an_id_outside_the_vocabulary_is_a_token_id_error_as_on_residual_gpt(tokens):
    """Audit 52d J09: tokens_to_residual_directions(-1) was W_U[:, 64] ('z'), without a word."""
    from interp.errors import TokenIdError

    model = model_with(bias=False, n_layers=3)
    tl = exported(model)
    with pytest.raises(TokenIdError, match="outside the vocabulary"):
        tl.tokens_to_residual_directions(tokens)
    if not isinstance(tokens, str):
        with pytest.raises(TokenIdError, match="outside the vocabulary"):
            model.tokens_to_residual_directions(tokens)


@tl3_only
def test_residual_directions_of_valid_ids_are_w_u_columns_and_a_list_is_one_row_per_id():
    tl = exported(model_with(bias=False, n_layers=3))
    torch.testing.assert_close(tl.tokens_to_residual_directions(5), tl.W_U[:, 5], rtol=0, atol=0)
    torch.testing.assert_close(tl.tokens_to_residual_directions("a"), tl.W_U[:, CHARS.index("a")], rtol=0, atol=0)
    torch.testing.assert_close(tl.tokens_to_residual_directions([5, 64]), tl.W_U[:, [5, 64]].T, rtol=0, atol=0)
    torch.testing.assert_close(
        tl.tokens_to_residual_directions(torch.tensor([[5, 64]])), tl.W_U[:, [[5, 64]]].movedim(0, -1), rtol=0, atol=0
    )


@tl3_only
@pytest.mark.parametrize("tokens", [[5, -1], [5, 70], torch.tensor([[5, 6], [7, -2]])])
def test_to_string_of_an_id_outside_the_tokenizer_is_a_token_id_error(tokens):
    """Audit 52d J09: to_string([5, -1]) was an OverflowError, to_string([5, 70]) dropped the 70."""
    from interp.errors import TokenIdError

    tl = exported(model_with(bias=False, n_layers=3))
    with pytest.raises(TokenIdError, match="outside the vocabulary"):
        tl.to_string(tokens)
    assert tl.to_string([CHARS.index(c) for c in "Hi"]) == "Hi"
    assert tl.to_string(tl.to_tokens(["Hi", "you"])) == ["Hi<|endoftext|>", "you"]  # padding is the tokenizer's


# --------------------------------------------------------------------------- 6, 7: empty prompts, no new tokens

_EMPTY = torch.zeros(1, 0, dtype=torch.long)
EMPTY_CALLS = {
    "forward ''": lambda tl: tl(""),
    "loss ''": lambda tl: tl("", return_type="loss"),
    "run_with_cache ''": lambda tl: tl.run_with_cache(""),
    "generate() (TL's default input '')": lambda tl: tl.generate(max_new_tokens=3, verbose=False),
    "generate(no positions)": lambda tl: tl.generate(_EMPTY, 3, verbose=False),
    "generate('', 0)": lambda tl: tl.generate("", 0, verbose=False),
    "forward(no positions)": lambda tl: tl(_EMPTY),
    "loss(no positions)": lambda tl: tl(_EMPTY, return_type="loss"),
}


@tl3_only
@pytest.mark.parametrize("call", EMPTY_CALLS.values(), ids=EMPTY_CALLS.keys())
def test_an_empty_prompt_is_refused_in_one_line_as_residual_gpt_refuses_it(call):
    """Audit 52d A17: tl('') gave (1, 0, 65) logits and a NaN loss; tl.generate() ended in an IndexError."""
    from interp.errors import ConfigError, ShapeError

    model = model_with(bias=False, n_layers=3)
    with pytest.raises(ConfigError):
        model(_EMPTY)
    with pytest.raises(ConfigError, match="pos >= 1"):
        model.generate(_EMPTY, 3)
    with pytest.raises(ShapeError, match="no tokens|no positions"):
        call(exported(model))


@tl3_only
def test_generate_with_no_new_tokens_returns_the_prompt_as_residual_gpt_does():
    """Audit 52d E18: generate(tokens, max_new_tokens=0) ended in torch.cat's ValueError."""
    from interp.errors import ConfigError

    model = model_with(bias=False, n_layers=3)
    tl = exported(model)
    toks = ids("ROMEO:")
    assert torch.equal(tl.generate(toks, 0, verbose=False), model.generate(toks, 0))
    assert tl.generate(toks, 0, return_type="str", verbose=False) == "ROMEO:"
    assert tl.generate("ROMEO:", 0, verbose=False) == "ROMEO:"
    assert torch.equal(tl.generate("ROMEO:", 0, return_type="tokens", verbose=False), toks)
    assert tl.generate(["ROMEO:", "Hi"], 0, verbose=False) == ["ROMEO:", "Hi"]
    same = tl.generate(["ROMEO:", "Hi"], 1, return_type="tokens", verbose=False)[:, :-1]  # TL's left padding
    assert torch.equal(tl.generate(["ROMEO:", "Hi"], 0, return_type="tokens", verbose=False), same)
    long = ids("First Citizen:\nBefore")  # past n_ctx: returned whole, as ResidualGPT's
    assert torch.equal(tl.generate(long, 0, verbose=False), model.generate(long, 0))
    with pytest.raises(ConfigError, match="max_new_tokens"):
        tl.generate(toks, -1, verbose=False)


# --------------------------------------------------------------------------- 5: an export's own weights


@tl3_only
def test_an_exports_own_weights_processed_back_into_it_are_exact_and_quiet():
    """Audit 52d D02: load_and_process_state_dict(tl.state_dict(), ...), the call the ValueBiasWarning names,
    showed WeightsOnlyWarning although the result is exact."""
    from transformer_lens import HookedTransformer

    from interp.errors import WeightsOnlyWarning

    model = model_with(bias=True, residual="attn_only", n_layers=3)
    toks = ids("First Citizen")
    tl, other = exported(model), exported(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeightsOnlyWarning)
        tl.load_and_process_state_dict(tl.state_dict(), fold_value_biases=False)
        other.load_and_process_state_dict(tl.state_dict(), fold_value_biases=False)  # an export of the same config
        tl.load_state_dict(tl.state_dict())
    with torch.no_grad():
        want = model(toks).log_softmax(-1)
        for mod in (tl, other):
            torch.testing.assert_close(mod(toks).log_softmax(-1), want, rtol=0, atol=1e-4)
    plain = HookedTransformer(tl.cfg)
    assert counted(WeightsOnlyWarning, lambda: plain.load_and_process_state_dict(tl.state_dict()), 1) == 1


# --------------------------------------------------------------------------- 4: a value-bias fold, saved


@tl3_only
def test_a_value_bias_fold_is_kept_in_the_saved_file_and_said_at_every_load(tmp_path):
    """Audit 52d H03: an export made with fold_value_biases=True warned once, at export; after save_hooked /
    load_hooked its v-ablation was 4.494 against ResidualGPT's 4.505 and nothing warned."""
    import interp
    from interp.errors import CheckpointError, ValueBiasWarning

    model = model_with(bias=True, n_layers=3)
    toks = ids("First Citizen:\n")
    truth = v_ablated_loss(model, toks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = interp.to_hooked_transformer(model, vocab=CHARS, fold_value_biases=True)
    assert folded.value_biases_moved == [0, 1, 2]
    interp.save_hooked(folded, tmp_path / "folded.pt")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(2):
            loaded = interp.load_hooked(tmp_path / "folded.pt")
    said = [str(w.message) for w in seen if issubclass(w.category, ValueBiasWarning)]
    assert len(said) == 2 and "[0, 1, 2]" in said[0] and "hook_v" in said[0], said
    assert abs(v_ablated_loss(loaded, toks) - truth) > 1e-4  # what the warning is about
    interp.save_hooked(loaded, tmp_path / "again.pt")  # a reload remembers it too
    assert counted(ValueBiasWarning, lambda: interp.load_hooked(tmp_path / "again.pt"), 1) == 1

    kept = exported(model)  # the default keeps b_V: saved and loaded without a word, and exact
    interp.save_hooked(kept, tmp_path / "kept.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValueBiasWarning)
        back = interp.load_hooked(tmp_path / "kept.pt")
        loaded.load_state_dict(kept.state_dict())  # b_V put back: nothing left to say
        interp.save_hooked(loaded, tmp_path / "restored.pt")
        interp.load_hooked(tmp_path / "restored.pt")
    assert abs(v_ablated_loss(back, toks) - truth) < 1e-4

    payload = torch.load(tmp_path / "folded.pt", weights_only=True)
    payload["residual_gpt_hooked"]["value_biases_moved"] = [7]
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="value_biases_moved"):
        interp.load_hooked(tmp_path / "bad.pt")


# --------------------------------------------------------------------------- 8: float64 through processing


@tl3_only
@pytest.mark.parametrize(
    "processing",
    [
        {},
        {"fold_ln": True, "center_writing_weights": False, "center_unembed": False},
        {"fold_ln": False, "center_writing_weights": True, "center_unembed": True},
    ],
    ids=["defaults", "fold_ln", "centring"],
)
def test_a_float64_export_with_processing_is_float64_exact(processing):
    """Audit 52d D13: TL 3.9's process_weights rounds every non-float32 tensor through float32, so a processed
    float64 export agreed with its model to ~4e-7 only (1e-14 unprocessed)."""
    import interp

    model = model_with(bias=True, n_layers=3).double()
    toks = ids("First Citizen:\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = interp.to_hooked_transformer(model, vocab=CHARS, **processing)
        assert tl.W_U.dtype == torch.float64
        with torch.no_grad():
            gap = (tl(toks).log_softmax(-1) - model(toks).log_softmax(-1)).abs().max().item()
            tl.load_and_process_state_dict(tl.state_dict(), fold_value_biases=False)  # again, after the export
            again = (tl(toks).log_softmax(-1) - model(toks).log_softmax(-1)).abs().max().item()
    assert gap < 1e-10 and again < 1e-10, (gap, again)
