"""interp.tl.hooked (and on TL 4 interp.tl.bridge): every checkpoint as a TransformerLens model that computes the same
function. convert is the installed major's export; HookedTransformer-only tests are marked tl3_only."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from majors import TL4, export, tl3_only

import interp
from interp import CheckpointError, ConfigError, ModelConfig, ResidualGPT, save_checkpoint
from interp.errors import ArgumentError, NoTokenizerError, ShapeError, TokenIdError, UnembedBiasWarning
from interp.files.gpt2 import gpt2_files

TOL = 1e-5
RESIDUALS = ("full", "attn_only", "ffn_only", "none")
ROUTINGS = {  # id -> (mixer, self_bias)
    "bias0": ("attention", 0.0),
    "bias4": ("attention", 4.0),
    "bias+inf": ("attention", math.inf),
    "bias-inf": ("attention", -math.inf),
    "uniform": ("uniform", 0.0),
}
CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # TinyShakespeare's 65
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # as the Makefile's ../shared/data


def tiny_config(**changes) -> ModelConfig:
    return ModelConfig(n_layers=2, d_model=32, n_heads=4, n_ctx=16, d_vocab=len(CHARS), **changes)


def trained(model: ResidualGPT, steps: int = 8, seed: int = 0) -> ResidualGPT:
    """A few Adam steps on random tokens: weights no longer look like their init."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        tokens = torch.randint(0, model.cfg.d_vocab, (4, model.cfg.n_ctx), generator=gen)
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def make_model(weights: str, seed: int = 0, **changes) -> ResidualGPT:
    torch.manual_seed(seed)
    if weights == "random":  # a wider init than training's 0.02, so attention patterns are far from uniform
        return ResidualGPT(tiny_config(init_std=0.2, **changes)).eval()
    return trained(ResidualGPT(tiny_config(**changes)), seed=seed)


def convert(source, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export(source, vocab=CHARS, **kwargs)


def tokens(seed: int = 1, batch: int = 3, n: int = 16) -> torch.Tensor:
    return torch.randint(0, len(CHARS), (batch, n), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs difference; the same infinities in the same places count as equal."""
    assert a.shape == b.shape
    assert torch.equal(torch.isinf(a), torch.isinf(b)) and torch.equal(a.isnan(), b.isnan())
    finite = torch.isfinite(b)
    return (a[finite] - b[finite]).abs().max().item() if finite.any() else 0.0


def compare(model: ResidualGPT, tl) -> tuple[float, dict[str, float]]:
    toks = tokens()
    with torch.no_grad():
        logits, cache = model.run_with_cache(toks)
        tl_logits, tl_cache = tl.run_with_cache(toks)
    shared = sorted(set(cache.keys()) & set(tl_cache.keys()))
    return (logits - tl_logits).abs().max().item(), {k: max_diff(cache[k], tl_cache[k]) for k in shared}


@pytest.mark.parametrize("weights", ["random", "trained"])
@pytest.mark.parametrize("routing", list(ROUTINGS))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_logits_and_caches_match(residual, routing, weights):
    mixer, self_bias = ROUTINGS[routing]
    model = make_model(weights, residual=residual, mixer=mixer, self_bias=self_bias)
    tl = convert(model)
    logit_diff, diffs = compare(model, tl)
    assert logit_diff <= TOL
    with torch.no_grad():  # ResidualGPT's training (fused SDPA) path too
        assert (model(tokens()) - tl(tokens())).abs().max().item() <= TOL
    for layer in range(model.cfg.n_layers):
        for name in ("attn.hook_attn_scores", "attn.hook_pattern", "hook_resid_mid", "hook_resid_post"):
            assert f"blocks.{layer}.{name}" in diffs
    bad = {k: v for k, v in diffs.items() if v > TOL}
    assert not bad, bad
    assert len(diffs) >= 33  # every ResidualGPT hook point


@pytest.mark.parametrize("residual", RESIDUALS)
def test_bias_untied_and_runtime_gain(residual):
    model = make_model("trained", residual=residual, bias=True, tie_embeddings=False, runtime_gain=1.7, self_bias=2.0)
    with torch.no_grad():  # non-zero biases, so the b_* mapping is exercised
        for name, p in model.named_parameters():
            if p.dim() == 1 and not name.endswith(".w"):
                p.normal_(0, 0.1)
    tl = convert(model)
    logit_diff, diffs = compare(model, tl)
    assert logit_diff <= TOL
    assert max(diffs.values()) <= TOL
    assert not torch.equal(tl.W_U, tl.W_E[: len(CHARS)].T)  # untied: W_U comes from unembed.weight


def test_pattern_rows_for_infinite_self_bias():
    tl = convert(make_model("random", self_bias=math.inf))
    _, cache = tl.run_with_cache(tokens())
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert torch.equal(pattern, torch.eye(16).expand_as(pattern))  # each position reads only itself
    tl = convert(make_model("random", self_bias=-math.inf))
    _, cache = tl.run_with_cache(tokens())
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert torch.equal(pattern[:, :, 0], torch.zeros_like(pattern[:, :, 0]))  # row 0 reads nothing
    assert torch.equal(pattern.diagonal(dim1=-2, dim2=-1), torch.zeros(3, 4, 16))
    assert torch.allclose(pattern[:, :, 1:].sum(-1), torch.ones(3, 4, 15))


@tl3_only
@pytest.mark.parametrize("routing", ["bias4", "bias-inf", "uniform"])
def test_kv_cache_decoding_matches_full_forward(routing):
    """Routing hooks find the self key when queries are offset by a kv cache (as in tl.generate)."""
    from transformer_lens import TransformerLensKeyValueCache

    mixer, self_bias = ROUTINGS[routing]
    tl = convert(make_model("random", residual="none", mixer=mixer, self_bias=self_bias))
    toks = tokens()
    kv = TransformerLensKeyValueCache.init_cache(tl.cfg, "cpu", batch_size=toks.shape[0])
    with torch.no_grad():
        full = tl(toks)
        steps = [tl(toks[:, :10], past_kv_cache=kv)] + [tl(toks[:, i : i + 1], past_kv_cache=kv) for i in range(10, 16)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= TOL


@pytest.mark.parametrize("residual", ["none", "ffn_only"])
def test_reset_hooks_keeps_architecture(residual):
    tl = convert(make_model("random", residual=residual, self_bias=-math.inf))
    toks = tokens()
    before = tl(toks)
    tl.add_hook("blocks.0.hook_attn_out", lambda x, hook: x * 0.0)
    assert not torch.equal(tl(toks), before)
    tl.reset_hooks()
    assert torch.equal(tl(toks), before)
    tl.reset_hooks(including_permanent=True)  # the architecture is modules, not hooks
    assert torch.equal(tl(toks), before)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_interventions_compose_like_residual_gpt(residual):
    """Patching hook_attn_out / hook_mlp_out reaches resid_mid / resid_post, as in ResidualGPT."""
    model = make_model("random", residual=residual, self_bias=4.0)
    tl = convert(model)
    hooks = [("blocks.0.hook_attn_out", lambda x, hook: x * 0.5), ("blocks.1.hook_mlp_out", lambda x, hook: -x)]
    toks = tokens()
    with torch.no_grad():
        expected = model.run_with_hooks(toks, fwd_hooks=hooks)
        got = tl.run_with_hooks(toks, fwd_hooks=hooks)
    assert (expected - got).abs().max().item() <= TOL


@pytest.mark.parametrize("residual", RESIDUALS)
def test_gradients_and_backward_hooks_match(residual):
    model = make_model("random", residual=residual, self_bias=4.0)
    tl = convert(model)
    names = [f"blocks.{l}.{n}" for l in range(2) for n in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid")]
    toks = tokens()

    def grads(m):
        got = {}
        hooks = [(n, lambda g, hook: got.__setitem__(hook.name, g.detach().clone())) for n in names]
        with m.hooks(bwd_hooks=hooks):
            logits = m(toks)
            torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), toks[:, 1:].flatten()).backward()
        return got

    expected, got = grads(model), grads(tl)
    assert sorted(got) == sorted(expected) == sorted(names)  # every bwd hook fired, also on rewired points
    for name in names:
        assert (expected[name] - got[name]).abs().max().item() <= TOL, name


@tl3_only
@pytest.mark.parametrize("residual", RESIDUALS)
def test_processing_keeps_log_probs(residual):
    model = make_model("trained", residual=residual, bias=True, self_bias=4.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and not name.endswith(".w"):
                p.normal_(0, 0.1)
    flags = dict(fold_ln=True, center_writing_weights=True, center_unembed=True, fold_value_biases=True)
    tl = convert(model, **flags, refactor_factored_attn_matrices=True)
    assert tl.cfg.normalization_type == "LNPre"
    toks = tokens()
    with torch.no_grad():
        expected = model(toks).log_softmax(-1)
        got = tl(toks).log_softmax(-1)
    assert (expected - got).abs().max().item() <= TOL


@tl3_only
def test_unprocessed_export_config_matches():
    model = make_model("random", residual="attn_only", tie_embeddings=False)
    tl = convert(model)  # majors.RAW: processing off
    cfg = tl.cfg
    assert (cfg.act_fn, cfg.normalization_type, cfg.positional_embedding_type) == ("gelu", "LN", "standard")
    assert cfg.default_prepend_bos is False
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.n_ctx) == (2, 32, 4, 8, 128, 16)
    assert torch.equal(tl.blocks[0].ln1.w, model.blocks[0].ln1.w)  # not folded
    assert torch.equal(tl.blocks[0].ln1.b, torch.zeros(32))  # bias=False -> zeros
    assert torch.equal(tl.W_U, model.unembed.weight.T)
    assert tl.W_Q.shape == (2, 4, 32, 8) and tl.W_O.shape == (2, 4, 8, 32)
    # W_E square with W_U (the trained rows); the tokenizer's <|endoftext|> embeds as zeros, never a logit
    assert (cfg.d_vocab, cfg.d_vocab_out) == (len(CHARS), len(CHARS)) and torch.equal(tl.W_E, model.embed.weight)
    eot = torch.tensor([[0, 1, len(CHARS)]])
    _, cache = tl.run_with_cache(eot)
    assert not cache["hook_embed"][0, 2].any()
    with pytest.raises(TokenIdError, match="special tokens"):
        tl(torch.tensor([[0, len(CHARS) + 1]]))


@tl3_only
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("residual", RESIDUALS)
def test_default_processing_is_from_pretrained_and_exact(residual, routing):
    """fold_ln, center_writing_weights, center_unembed by default, on every wiring and routing: log-probs and
    losses are ResidualGPT's, logits up to one constant per position, and TL's LayerNorm recipes exact."""
    mixer, bias = ROUTINGS[routing]
    model = make_model("trained", residual=residual, mixer=mixer, self_bias=bias, bias=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = interp.to_hooked_transformer(model, vocab=CHARS)
    assert tl.cfg.normalization_type == "LNPre"  # folded
    toks = tokens()
    with torch.no_grad():
        ours, theirs = model(toks), tl(toks)
        _, cache = tl.run_with_cache(toks)
    assert max_diff(ours.log_softmax(-1), theirs.log_softmax(-1)) < TOL
    shift = ours - theirs
    assert max_diff(shift, shift[..., :1].expand_as(shift)) < TOL  # center_unembed: one constant per position
    # TL's recipe (apply_ln_to_stack . W_U + b_U) gives the logit differences; without b_U (nonzero: fold_ln
    # moved ln_final.b there) it would not, which the call says
    final = cache["resid_post", -1]
    with pytest.warns(UnembedBiasWarning, match="b_U"):
        scaled = cache.apply_ln_to_stack(final, layer=-1)
    rebuilt = scaled @ tl.W_U + tl.b_U
    assert max_diff(rebuilt - rebuilt[..., :1], theirs - theirs[..., :1]) < 1e-4
    # every stream read is a LayerNorm: the centred stream differs from ResidualGPT's by its mean only
    with torch.no_grad():
        _, raw = model.run_with_cache(toks)
    for name in ("blocks.0.hook_resid_mid", "blocks.1.hook_resid_post"):
        centred = raw[name] - raw[name].mean(-1, keepdim=True)
        assert max_diff(cache[name], centred) < 1e-4


@tl3_only
def test_fold_ln_off_warns_at_every_call_of_what_needs_it():
    from interp.errors import UnfoldedLayerNormWarning

    model = make_model("trained", residual="full")
    tl = convert(model)  # fold_ln=False
    toks = tokens()
    with torch.no_grad():
        _, cache = tl.run_with_cache(toks)
    calls = {
        "apply_ln_to_stack": lambda: cache.apply_ln_to_stack(cache["resid_post", -1], layer=-1),
        "tokens_to_residual_directions": lambda: tl.tokens_to_residual_directions(toks[:, -1]),
        "decompose_resid": lambda: cache.decompose_resid(apply_ln=True),
        "stack_head_results": lambda: cache.stack_head_results(apply_ln=True),
        "get_full_resid_decomposition": lambda: cache.get_full_resid_decomposition(apply_ln=True, expand_neurons=False),
        "accumulated_resid mid-layer": lambda: cache.accumulated_resid(layer=1, apply_ln=True),
    }
    tl.set_use_attn_result(True)
    with torch.no_grad():
        _, cache = tl.run_with_cache(toks)
    for what, call in calls.items():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            for _ in range(2):
                call()
        assert sum(issubclass(w.category, UnfoldedLayerNormWarning) for w in seen) == 2, what
        assert all(w.filename == __file__ for w in seen if issubclass(w.category, UnfoldedLayerNormWarning))
    # the logit lens up to the unembedding applies ln_final itself (recompute_ln): right, and quiet
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnfoldedLayerNormWarning)
        lens = cache.accumulated_resid(layer=-1, apply_ln=True)
    with torch.no_grad():
        assert max_diff(lens[-1] @ tl.W_U, model(toks)) < 1e-4


def test_uniform_mixer_has_zero_qk():
    tl = convert(make_model("random", mixer="uniform"))
    assert torch.equal(tl.W_Q, torch.zeros_like(tl.W_Q)) and torch.equal(tl.W_K, torch.zeros_like(tl.W_K))


def test_inputs_model_checkpoint_and_path_agree(tmp_path):
    model = make_model("random", residual="none")
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, vocab=CHARS)
    toks = tokens()
    outs = [convert(src)(toks) for src in (model, interp.load_checkpoint(path), path, str(path))]
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


@tl3_only
def test_position_blind_refused():
    model = ResidualGPT(tiny_config(mixer="position_blind"))
    with pytest.raises(ConfigError, match="position_blind.*no TransformerLens equivalent"):
        interp.to_hooked_transformer(model)


def test_not_a_model_refused():
    with pytest.raises(interp.ToolkitError, match="ResidualGPT, a Checkpoint or a checkpoint path"):
        export(42)


@pytest.mark.parametrize("change", ["missing", "extra", "shape"])
def test_weights_that_do_not_fit_are_refused(tmp_path, change):
    model = make_model("random")
    ckpt = interp.load_checkpoint(_saved(tmp_path, model))
    if change == "missing":
        del ckpt.weights["blocks.1.mlp.out_proj.weight"]
    elif change == "extra":
        ckpt.weights["blocks.1.attn.extra"] = torch.zeros(3)
    else:
        ckpt.weights["ln_final.w"] = torch.ones(31)
    key = {"missing": "out_proj", "extra": "extra", "shape": "ln_final"}[change]
    with pytest.raises(CheckpointError, match=f"do not match.*{key}"):
        export(ckpt)


def test_unknown_parameter_is_an_error():
    model = make_model("random")
    model.blocks[0].register_parameter("surprise", torch.nn.Parameter(torch.zeros(2)))
    with pytest.raises(interp.ToolkitError, match="surprise"):
        export(model, vocab=CHARS)


def _saved(tmp_path, model, **state) -> Path:
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, **state)
    return path


def test_char_tokenizer_from_checkpoint_vocab(tmp_path):
    model = make_model("random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = export(_saved(tmp_path, model, vocab=CHARS))
    text = "ROMEO:\nO  me!"
    assert tl.to_str_tokens(text) == list(text)
    assert tl.to_tokens(text)[0].tolist() == [CHARS.index(c) for c in text]
    assert tl.to_string(tl.to_tokens(text)[0]) == text
    assert torch.equal(tl(text), tl(torch.tensor([[CHARS.index(c) for c in text]])))


def test_vocab_of_the_wrong_size_refused():
    with pytest.raises(ConfigError, match="d_vocab"):
        export(make_model("random"), vocab=CHARS[:-1])


def test_no_tokenizer_warns():
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11))
    with pytest.warns(UserWarning, match="no tokenizer attached"):
        tl = interp.load_tl(model)
    assert tl.tokenizer is None


TEXT_CALLS = {
    "to_tokens": lambda tl: tl.to_tokens("abc"),
    "to_string": lambda tl: tl.to_string(torch.tensor([1, 2])),
    "to_str_tokens": lambda tl: tl.to_str_tokens(torch.tensor([1, 2])),
    "to_single_token": lambda tl: tl.to_single_token("a"),
    "to_single_str_token": lambda tl: tl.to_single_str_token(3),
    "get_token_position": lambda tl: tl.get_token_position("a", "abc"),
    "forward": lambda tl: tl("abc"),
    "forward on a list": lambda tl: tl(["ab", "c"]),
    "forward on an empty list": lambda tl: tl([]),
    "generate to text": lambda tl: tl.generate(torch.tensor([[1]]), stop_at_eos=False, return_type="str"),
    "run_with_cache": lambda tl: tl.run_with_cache("abc"),
    "generate": lambda tl: tl.generate("abc", max_new_tokens=2, verbose=False),
    "tokens_to_residual_directions": lambda tl: tl.tokens_to_residual_directions("a"),
}


@pytest.mark.parametrize("call", TEXT_CALLS)
def test_text_on_an_export_without_a_tokenizer_is_one_error_naming_the_way_out(call):
    """F45: where TL asserts (or fails on None.decode), one NoTokenizerError, still an AssertionError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = interp.load_tl(ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11)))
    with pytest.raises(NoTokenizerError, match="needs a tokenizer.*token ids.*vocab=") as caught:
        TEXT_CALLS[call](tl)
    assert isinstance(caught.value, AssertionError)


# What forward, run_with_cache and generate take is text (a str, a list of str) or a tensor; TL fails inside on
# anything else (an AttributeError on a tuple, None or a number, an IndexError on [], the tokenizer's ValueError
# on a list of ids)
NOT_INPUT = {
    "a tuple of texts": ("ab", "c"),
    "a list of ids": [1, 2],
    "a tuple of ids": (1, 2),
    "ids in nested lists": [[1, 2]],
    "an array of ids": np.array([[1, 2]]),
    "a number": 3,
    "None": None,
    "an empty list": [],
}
CALLS = {
    "forward": lambda tl, x: tl(x),
    "forward by keyword": lambda tl, x: tl(input=x),
    "run_with_cache": lambda tl, x: tl.run_with_cache(x),
    "generate": lambda tl, x: tl.generate(x, max_new_tokens=2, verbose=False),
}


@pytest.fixture(scope="module")
def char_tl():
    return export(
        ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11)), vocab=list("abcdefghijk")
    )


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("given", NOT_INPUT)
def test_what_is_neither_text_nor_a_tensor_is_one_argument_error_naming_the_way_in(char_tl, call, given):
    with pytest.raises(ArgumentError, match=f"{call.split()[0]} takes text .* or a tensor of token ids, not ") as e:
        CALLS[call](char_tl, NOT_INPUT[given])
    assert isinstance(e.value, TypeError)
    # what it takes still runs: a list of texts, and ids
    assert CALLS[call](char_tl, ["ab", "c"]) is not None and CALLS[call](char_tl, torch.tensor([[1, 2]])) is not None


@pytest.mark.parametrize("eos", [[], (), "a", 2.0, True, -1, 999, [1, "x"], torch.tensor(1)])
def test_generate_refuses_an_eos_token_id_it_could_never_stop_at(char_tl, eos):
    with pytest.raises(ConfigError, match=r"eos_token_id: an id in 0\.\.11 or a non-empty list of them"):
        char_tl.generate(torch.tensor([[1]]), max_new_tokens=2, eos_token_id=eos, verbose=False)


def test_generate_stops_at_an_id_of_the_vocabulary_or_a_list_of_them_within_and_past_n_ctx():
    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11)).eval()
    tl = export(model, vocab=list("abcdefghijk"))
    never = tl.tokenizer.eos_token_id  # the tokenizer's own end-of-text id: it has no logit
    for n_new in (4, 9):  # within n_ctx (8), and past it, where each token is made from the last n_ctx
        greedy = {"max_new_tokens": n_new, "do_sample": False, "verbose": False}
        first = int(tl.generate(torch.tensor([[1]]), stop_at_eos=False, **greedy)[0, 1])
        for eos in (first, [first, 3], never):
            for explicit in ({}, {"stop_at_eos": True}):  # TL's default, and said
                out = tl.generate(torch.tensor([[1]]), eos_token_id=eos, **explicit, **greedy)
                assert out.shape == (1, 2 if eos != never else 1 + n_new) and int(out[0, 1]) == first
    with pytest.raises(ShapeError, match=r"token ids \[batch, pos\], got shape \(2,\): pass tokens\[None\]"):
        tl.generate(torch.tensor([1, 2]), **greedy)
    for call in CALLS:
        with pytest.raises(ShapeError, match="got one number"):
            CALLS[call](tl, torch.tensor(3))


def test_generate_without_a_tokenizer_or_on_embeddings_gives_the_models_greedy_tokens_with_the_cache_on():
    """TL 3.9's key-value cache without an attention mask offset W_pos across the whole sequence: the export
    leaves the cache off there (audit F1), so every way in continues as ResidualGPT does."""
    torch.manual_seed(1)
    model = ResidualGPT(ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=16, d_vocab=11)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 1)
    prompt, want = torch.tensor([[1, 2, 3]]), [[1, 2, 3]]
    for _ in range(5):
        with torch.no_grad():
            want[0].append(int(model(torch.tensor(want))[0, -1].argmax()))
    greedy = {"max_new_tokens": 5, "stop_at_eos": False, "do_sample": False, "verbose": False}
    for vocab in (None, list("abcdefghijk")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tl = interp.load_tl(model, vocab=vocab)
        for kv in (True, False):
            assert tl.generate(prompt, use_past_kv_cache=kv, **greedy).tolist() == want
            if not TL4:  # the bridge takes no embeddings to generate from
                out = tl.generate(tl.embed(prompt), use_past_kv_cache=kv, return_type="tokens", **greedy)
                assert out.tolist() == [want[0][3:]]


def test_generate_on_ids_without_a_tokenizer_names_stop_at_eos():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = interp.load_tl(ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=11)))
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ConfigError, match="stop_at_eos=False"):
        tl.generate(ids, max_new_tokens=2, verbose=False)
    assert tl.generate(ids, max_new_tokens=2, stop_at_eos=False, verbose=False).shape == (1, 4)
    assert tl.generate(ids, max_new_tokens=2, eos_token_id=10, verbose=False).shape[0] == 1


def test_gpt2_tokenizer_from_local_files(monkeypatch):
    data = os.environ.get("RESIDUAL_DATA_DIR") or str(SHARED_DATA)
    if gpt2_files(data) is None:
        pytest.skip(f"GPT-2 BPE files not found under {data}/gpt2 (set RESIDUAL_DATA_DIR)")
    monkeypatch.setenv("RESIDUAL_DATA_DIR", data)
    model = ResidualGPT(ModelConfig(n_layers=1, d_model=16, n_heads=2, n_ctx=8, d_vocab=50257))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = export(model)
    assert tl.to_tokens("Hello world")[0].tolist() == [15496, 995]
    assert tl.to_tokens(" the")[0].tolist() == [262]
    assert tl.to_str_tokens("Hello world") == ["Hello", " world"]


def test_gpt2_padding_is_an_untrained_id_so_padded_batches_are_exact_or_warn(monkeypatch, tmp_path):
    """GPT-2 pads with <|endoftext|> (50256), a trained id: the export's padded loss scored the pads (10.745
    against 10.687 on a random model, 8.06 against 5.49 on a trained smoke one) and generate went on after them,
    silently. The export pads with <|pad|> (50257), past the trained ids, on both majors."""
    import torch.nn.functional as F

    from interp.errors import UntrainedTokenWarning

    data = os.environ.get("RESIDUAL_DATA_DIR") or str(SHARED_DATA)
    if gpt2_files(data) is None:
        pytest.skip(f"GPT-2 BPE files not found under {data}/gpt2 (set RESIDUAL_DATA_DIR)")
    monkeypatch.setenv("RESIDUAL_DATA_DIR", data)
    torch.manual_seed(21)
    model = ResidualGPT(ModelConfig(n_layers=2, d_model=32, n_heads=4, n_ctx=32, d_vocab=50257)).eval()
    with torch.no_grad():
        model.embed.weight.mul_(5.0)  # log-probs far from uniform, so a scored pad shows
    model.vocab_state = {"encoding": "gpt2"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tl = export(model)
    prompts = ["Hello world, this is", "The cat", "Hi"]
    alone = [tl.to_tokens(p)[0] for p in prompts]
    padded = tl.to_tokens(prompts)
    assert padded[1, -1].item() == 50257 == tl.tokenizer.pad_token_id
    with torch.no_grad():
        want = torch.cat([F.cross_entropy(model(t[None])[0, :-1], t[1:], reduction="none") for t in alone]).mean()
        assert abs(tl(prompts, return_type="loss").item() - want.item()) < 1e-5
    with pytest.warns(UntrainedTokenWarning, match="end in special"):
        tl.generate(padded, max_new_tokens=2, do_sample=False, verbose=False)
    if TL4:
        from interp.tl.bridge import load_bridge as load
        from interp.tl.bridge import save_bridge as save
    else:
        from interp.tl.hooked import load_hooked as load
        from interp.tl.hooked import save_hooked as save
    save(tl, tmp_path / "gpt2.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = load(tmp_path / "gpt2.pt")
    assert again.tokenizer.pad_token_id == 50257 and again.to_tokens(prompts)[1, -1].item() == 50257


@tl3_only
def test_non_full_warning_at_every_conversion():
    import interp.tl.hooked as hooked

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hooked.to_hooked_transformer(make_model("random", residual="full"), vocab=CHARS)
        hooked.to_hooked_transformer(make_model("random", residual="none"), vocab=CHARS)
        hooked.to_hooked_transformer(make_model("random", residual="attn_only"), vocab=CHARS)
    messages = [str(w.message) for w in caught if issubclass(w.category, hooked.NonAdditiveResidualWarning)]
    assert len(messages) == 2 and "residual='none'" in messages[0] and "interp.reading.decompose" in messages[0]


@tl3_only
def test_fold_value_biases_refused_when_a_row_attends_nowhere():
    model = make_model("random", bias=True, self_bias=-math.inf)
    with pytest.raises(ConfigError, match="fold_value_biases"):
        interp.to_hooked_transformer(model, vocab=CHARS, fold_value_biases=True)


def test_a_model_loaded_with_its_vocabulary_exports_with_its_tokenizer(tmp_path):
    """ResidualGPT.from_checkpoint keeps the checkpoint's vocabulary (model.codec); the export of that model, with
    no vocab= given, tokenizes text with it as the export of the checkpoint path does (to_str_tokens, generate)."""
    save_checkpoint(tmp_path / "ckpt.pt", make_model("trained"), vocab=CHARS)
    model = ResidualGPT.from_checkpoint(tmp_path / "ckpt.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_model, from_path = export(model), export(tmp_path / "ckpt.pt")
    assert from_model.tokenizer is not None
    assert from_model.to_str_tokens("ROMEO:", prepend_bos=False) == list("ROMEO:")
    ids = from_model.to_tokens("ROMEO:", prepend_bos=False)
    assert torch.equal(ids, from_path.to_tokens("ROMEO:", prepend_bos=False))
    assert ids[0].tolist() == model.codec.encode("ROMEO:")


@tl3_only
@pytest.mark.parametrize("residual", ["full", "attn_only"])
@pytest.mark.parametrize("square", ["vocab", "mlp", "ctx", "all"])
def test_processing_exact_when_shapes_are_square(residual, square):
    """TL 3.9's fold_layer_norm guesses layouts from shapes: at d_vocab == d_model (a 32-character corpus at
    d_model=32) it scaled W_U along the vocabulary and moved log-probs by 0.02, silently. Every square shape
    is exact, by the export and by TL's own process_weights_ on an unprocessed export."""
    d = 32
    sizes = {"d_vocab": 30, "d_mlp": 64, "n_ctx": 16}
    sizes.update({"vocab": {"d_vocab": d}, "mlp": {"d_mlp": d}, "ctx": {"n_ctx": d}}.get(square, {}))
    if square == "all":
        sizes = {"d_vocab": d, "d_mlp": d, "n_ctx": d}
    torch.manual_seed(0)
    config = ModelConfig(n_layers=2, d_model=d, n_heads=4, residual=residual, bias=True, **sizes)
    model = ResidualGPT(config).eval()
    with torch.no_grad():  # LayerNorms far from identity, so a fold along the wrong axis shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if name.endswith(".w") else 0.0, 0.5)
    toks = torch.randint(0, sizes["d_vocab"], (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(toks).log_softmax(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processed = interp.to_hooked_transformer(model)
        by_hand = interp.to_hooked_transformer(model, fold_ln=False, center_writing_weights=False, center_unembed=False)
        by_hand.process_weights_()  # TL folds b_V too: log-probs unchanged
    for tl in (processed, by_hand):
        assert tl.cfg.normalization_type == "LNPre"
        with torch.no_grad():
            assert max_diff(tl(toks).log_softmax(-1), expected) < TOL
