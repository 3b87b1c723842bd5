"""No silent wrong numbers (issue 25): each habit a researcher brings gives the right number or a clear refusal.

One table per habit. A row passes when the call either refuses (an exception, or the
toolkit's warning for that habit) or gives the right number; a row fails when a wrong
number comes back without a word.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_hooked import CHARS, convert, make_model, tiny_config, tokens
from transformer_lens import HookedTransformer, HookedTransformerConfig

import interp.tl.hooked as hooked
from interp import CheckpointError, ConfigError, ResidualGPT, ToolkitError, load_hooked, save_checkpoint, save_hooked
from interp.errors import (
    HiddenRoutingWarning,
    LogitAttrsWarning,
    TrainModeWarning,
    UntrainedTokenWarning,
    WeightsOnlyWarning,
)
from interp.files.checkpoint import load_checkpoint
from interp.reading.decompose import DecompositionError, decompose, direct_logit_attribution, resid_sites
from interp.tl.guards import model_from_checkpoint

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-5


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def warned(category, fn, *args, **kwargs):
    """(fn's result, whether it warned `category`)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, any(issubclass(w.category, category) for w in record)


# ----------------------------------------------------------------- 1. save_hooked files through TL's loaders


def plain_twin(tl) -> HookedTransformer:
    """A plain HookedTransformer with the export's TL config, as a user would build one from the file's record."""
    fields = hooked.convert.tl_config_dict(tl.cfg)
    fields["dtype"] = getattr(torch, fields["dtype"])
    return quiet(HookedTransformer, HookedTransformerConfig(**fields))


def _tensors(payload):
    return {k: v for k, v in payload.items() if isinstance(v, torch.Tensor)}


ROUTES = {
    "load_state_dict strict": lambda m, p: m.load_state_dict(torch.load(p)),
    "load_state_dict strict=False": lambda m, p: m.load_state_dict(torch.load(p), strict=False),
    "tensors by hand, strict=False": lambda m, p: m.load_state_dict(_tensors(torch.load(p)), strict=False),
    "nested state_dict, strict=False": lambda m, p: m.load_state_dict(torch.load(p)["state_dict"], strict=False),
    "load_and_process_state_dict": lambda m, p: m.load_and_process_state_dict(
        torch.load(p), fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    ),
    "load_and_process_state_dict, TL defaults": lambda m, p: m.load_and_process_state_dict(torch.load(p)),
    "from_pretrained(path)": lambda m, p: HookedTransformer.from_pretrained(str(p)),
}
WIRINGS = {
    "attn_only": dict(residual="attn_only"),
    "ffn_only": dict(residual="ffn_only"),
    "attn_only + uniform": dict(residual="attn_only", mixer="uniform"),
    "self_bias 4": dict(self_bias=4.0),
    "none": dict(residual="none"),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("wiring", list(WIRINGS))
def test_saved_export_is_never_taken_in_silently_wrong(tmp_path, wiring, route):
    tl = convert(make_model("trained", **WIRINGS[wiring]))
    path = tmp_path / "x.tl.pt"
    save_hooked(tl, path)
    plain = plain_twin(tl)
    toks = tokens(batch=1)
    try:
        loaded = quiet(ROUTES[route], plain, path)
    except Exception:  # noqa: BLE001 - any refusal is right; a silent load is what must not happen
        return
    model = loaded if isinstance(loaded, HookedTransformer) else plain
    with torch.no_grad():
        off = (quiet(model, toks) - tl(toks)).abs().max().item()
    assert off < TOL, f"{route} took in a {wiring} export as another model (logits off by {off:.3g})"


MEMORY_ROUTES = {  # the export's state_dict() in memory, into a plain HookedTransformer
    "strict=False": lambda m, sd: m.load_state_dict(sd, strict=False),
    "assign=True, strict=False": lambda m, sd: m.load_state_dict(sd, strict=False, assign=True),
    "by hand": lambda m, sd: [p.data.copy_(sd[n]) for n, p in m.named_parameters()],
    "load_and_process_state_dict": lambda m, sd: m.load_and_process_state_dict(
        sd, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    ),
    "torch.save, then strict=False": lambda m, sd: m.load_state_dict(_through_a_file(sd), strict=False),
}


def _through_a_file(sd):
    import io

    buffer = io.BytesIO()
    torch.save(sd, buffer)
    buffer.seek(0)
    return torch.load(buffer)


@pytest.mark.parametrize("route", list(MEMORY_ROUTES))
@pytest.mark.parametrize("wiring", [*WIRINGS, "full"])
def test_an_exports_state_dict_in_memory_warns_where_a_plain_model_would_compute_another(wiring, route):
    tl = convert(make_model("trained", **WIRINGS.get(wiring, {})))
    plain = plain_twin(tl)
    try:  # the word comes when the weights are read outside an export of the same ModelConfig
        _, said = warned(WeightsOnlyWarning, lambda: MEMORY_ROUTES[route](plain, tl.state_dict()))
    except Exception:  # noqa: BLE001 - a refusal is right too
        return
    toks = tokens(batch=1)
    with torch.no_grad():
        off = (quiet(plain, toks) - tl(toks)).abs().max().item()
    assert said or off < TOL, f"{route}: a {wiring} export's weights computed another model (off by {off:.3g})"
    assert said == (wiring != "full")  # and no word where the weights alone are the model


@pytest.mark.parametrize("wiring", list(WIRINGS))
def test_an_exports_state_dict_back_into_an_export_of_its_config_is_exact_and_quiet(wiring):
    """Issue 36: the WeightsOnlyWarning was a false alarm on tl.load_state_dict(tl.state_dict()) (exact); it is said
    only when the weights are read elsewhere: another ModelConfig's export, torch.save (the file is a plain
    OrderedDict that weights_only loading reads)."""
    import io

    tl = convert(make_model("trained", **WIRINGS[wiring]))
    twin = convert(make_model("random", **WIRINGS[wiring]))
    toks = tokens()
    _, said = warned(WeightsOnlyWarning, lambda: twin.load_state_dict(tl.state_dict()))
    assert not said
    _, said = warned(WeightsOnlyWarning, lambda: tl.load_state_dict(tl.state_dict()))
    assert not said
    with torch.no_grad():
        assert torch.equal(twin(toks), tl(toks))
    buffer = io.BytesIO()
    _, said = warned(WeightsOnlyWarning, lambda: torch.save(tl.state_dict(), buffer))
    assert said
    buffer.seek(0)
    back = torch.load(buffer, weights_only=True)
    assert type(back) is OrderedDict and set(back) == set(tl.state_dict().keys())
    for read in (lambda sd: sd.pop("embed.W_E"), lambda sd: sd.popitem(), lambda sd: sd.setdefault("embed.W_E")):
        _, said = warned(WeightsOnlyWarning, lambda read=read: read(tl.state_dict()))
        assert said  # every way of taking the weights out by hand (the audit found pop and popitem quiet)
    changed = {"residual": "none"} if "mixer" in WIRINGS[wiring] else {"self_bias": 2.0}  # uniform takes no bias
    other = convert(make_model("random", **{**WIRINGS[wiring], **changed}))
    _, said = warned(WeightsOnlyWarning, lambda: other.load_state_dict(tl.state_dict(), strict=False))
    assert said


@pytest.mark.parametrize("wiring", [*WIRINGS, "full"])
def test_load_hooked_round_trips_exactly_and_names_the_model(tmp_path, wiring):
    tl = convert(make_model("trained", **WIRINGS.get(wiring, {})))
    save_hooked(tl, tmp_path / "x.tl.pt")
    back = quiet(load_hooked, tmp_path / "x.tl.pt")
    toks = tokens()
    with torch.no_grad():
        assert torch.equal(back(toks), tl(toks))
    assert back.cfg.model_name == tl.cfg.model_name
    assert f"residual={back.model_config.residual}" in back.cfg.model_name


# ----------------------------------------------------------------- 2. eval mode from every loader


def _saved(tmp_path, **changes):
    model = ResidualGPT(tiny_config(dropout=0.2, **changes))
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=CHARS)
    return tmp_path / "ckpt.pt"


LOADERS = {
    "ResidualGPT.from_checkpoint": lambda p: ResidualGPT.from_checkpoint(p),
    "from_checkpoint(Checkpoint)": lambda p: ResidualGPT.from_checkpoint(load_checkpoint(p)),
    "to_hooked_transformer(path)": lambda p: quiet(hooked.to_hooked_transformer, p),
    "model_from_checkpoint": lambda p: model_from_checkpoint(load_checkpoint(p)),
    "load_hooked": lambda p: (
        save_hooked(quiet(hooked.to_hooked_transformer, p), p.with_suffix(".tl")),
        quiet(load_hooked, p.with_suffix(".tl")),
    )[1],
}


@pytest.mark.parametrize("loader", list(LOADERS))
def test_every_loader_returns_eval_mode(tmp_path, loader):
    model = LOADERS[loader](_saved(tmp_path))
    assert not model.training and not any(m.training for m in model.modules())


@pytest.mark.parametrize("mode,dropout,warns", [("train", 0.2, True), ("eval", 0.2, False), ("train", 0.0, False)])
def test_cache_in_train_mode_with_dropout_warns(mode, dropout, warns):
    model = ResidualGPT(tiny_config(dropout=dropout)).train(mode == "train")
    _, did = warned(TrainModeWarning, model.run_with_cache, tokens())
    assert did == warns


def _ablate_head0(z, hook):
    return torch.cat([0 * z[..., :1, :], z[..., 1:, :]], -2)


def _patch_resid_pre(model):
    from transformer_lens import patching

    clean, corrupt = tokens(seed=1, batch=1), tokens(seed=2, batch=1)
    _, clean_cache = quiet(model.run_with_cache, clean)
    return patching.get_act_patch_resid_pre(model, corrupt, clean_cache, lambda logits: logits[0, -1, 0])


def _hooked_forward(model):
    model.add_hook("blocks.0.hook_resid_mid", lambda x, hook: x)
    try:
        return model(tokens())
    finally:
        model.reset_hooks()


HOOKED_CALLS = {
    "run_with_hooks": lambda m: m.run_with_hooks(tokens(), fwd_hooks=[("blocks.1.attn.hook_z", _ablate_head0)]),
    "hooks() context": lambda m: _in_hooks(m),
    "add_hook + forward": _hooked_forward,
    "transformer_lens.patching": _patch_resid_pre,
    "no_grad run_with_hooks": lambda m: torch.no_grad()(HOOKED_CALLS["run_with_hooks"])(m),
}


def _in_hooks(model):
    with model.hooks(fwd_hooks=[("blocks.0.hook_mlp_out", lambda x, hook: -x)]):
        return model(tokens())


@pytest.mark.parametrize("call", list(HOOKED_CALLS))
@pytest.mark.parametrize("mode,dropout,warns", [("train", 0.2, True), ("eval", 0.2, False), ("train", 0.0, False)])
def test_hooked_calls_in_train_mode_with_dropout_warn(mode, dropout, warns, call):
    model = ResidualGPT(tiny_config(dropout=dropout)).train(mode == "train")
    _, did = warned(TrainModeWarning, HOOKED_CALLS[call], model)
    assert did == warns, call


def test_plain_training_forward_and_gradient_probe_say_nothing():
    from probes.gradients import capture_resid_grads

    model = ResidualGPT(tiny_config(dropout=0.2)).train()
    _, did_plain = warned(TrainModeWarning, model, tokens())
    with capture_resid_grads(model):
        _, did_probe = warned(TrainModeWarning, model, tokens())
    assert not did_plain and not did_probe


def test_export_cache_is_exact_in_train_mode():
    """TransformerLens has no dropout: an export's cache in train mode is its eval-mode cache, no word needed."""
    tl = convert(make_model("trained", dropout=0.2))
    (_, eval_cache), warned_eval = warned(TrainModeWarning, tl.run_with_cache, tokens())
    (_, train_cache), warned_train = warned(TrainModeWarning, tl.train().run_with_cache, tokens())
    assert not warned_eval and not warned_train
    assert all(torch.equal(eval_cache[k], train_cache[k]) for k in eval_cache.keys())


# ----------------------------------------------------------------- 3. logit_attrs sums to the logit or warns


def _logit_attrs_case(kind: str):
    model = make_model("trained", bias=kind.endswith("bias"))
    if kind.startswith("ResidualGPT"):
        return model, model
    return model, convert(model, fold_ln="fold_ln" in kind)


@pytest.mark.parametrize("kind", ["export", "export fold_ln", "export fold_ln bias", "ResidualGPT", "ResidualGPT bias"])
def test_logit_attrs_sum_to_the_logit_difference_or_warn(kind):
    model, runner = _logit_attrs_case(kind)
    toks = tokens(batch=1)
    with torch.no_grad():
        logits, cache = runner.run_with_cache(toks)
    stack = cache.decompose_resid(return_labels=False)
    attrs, did = warned(LogitAttrsWarning, cache.logit_attrs, stack, tokens=3, incorrect_tokens=5)
    off = (attrs.sum(0) - (logits[..., 3] - logits[..., 5])).abs().max().item()
    assert did or off < 1e-4, f"{kind}: logit_attrs off by {off:.3g} with no word"


# ----------------------------------------------------------------- 4. interp.reading.decompose on every TL model kind

TL_KINDS = {
    "standard": {},
    "shortformer": dict(positional_embedding_type="shortformer"),
    "attn_only": dict(attn_only=True),
    "parallel_attn_mlp": dict(parallel_attn_mlp=True),
    "rotary": dict(positional_embedding_type="rotary", rotary_dim=4),
    "no norm": dict(normalization_type=None),
    "RMS": dict(normalization_type="RMS"),
    "norm before and after": dict(use_normalization_before_and_after=True, normalization_type="RMS"),
    "logit soft cap": dict(output_logits_soft_cap=5.0),
}


def tl_model(**kind) -> HookedTransformer:
    torch.manual_seed(0)
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=16,
        n_ctx=8,
        d_head=4,
        n_heads=4,
        d_vocab=11,
        d_mlp=32,
        act_fn="gelu",
        normalization_type=kind.pop("normalization_type", "LN"),
        **kind,
    )
    model = quiet(HookedTransformer, cfg).eval()
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so leaving one out shows
        for name, p in model.named_parameters():
            if name.endswith((".w", ".b", "b_U", "b_in", "b_out", "b_O")):
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("kind", list(TL_KINDS))
def test_decompose_is_exact_or_refuses_by_name_on_tl_kinds(kind, per_head):
    model = tl_model(**TL_KINDS[kind])
    toks = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, cache = model.run_with_cache(toks)
    for site in [*resid_sites(2), "blocks.1.hook_resid_pre", "final"]:
        try:
            parts = decompose(cache, site, per_head=per_head)
        except DecompositionError as e:  # a refusal names why
            assert any(word in str(e) for word in ("resid_mid", "per_head", "attn_only", "parallel")), str(e)
            continue
        stream = cache[site if site != "final" else "blocks.1.hook_resid_post"]
        assert (parts.stack.sum(0) - stream).abs().max().item() < TOL, (kind, site)
    try:
        attr = direct_logit_attribution(cache, 3, per_head=per_head)
    except DecompositionError as e:
        assert "soft" in str(e) or "per_head" in str(e), str(e)
        return
    direct = logits[..., 3]
    assert (attr.target - direct).abs().max().item() < 1e-4, kind
    assert (attr.values.sum(0) - direct).abs().max().item() < 1e-4, kind


HOOKS_UNDER_CACHE = {  # hook -> whether per-head terms still rebuild the stream
    "none": ([], True),
    "zero attn_out 0": ([("blocks.0.hook_attn_out", lambda x, hook: torch.zeros_like(x))], False),
    "scale attn_out 1": ([("blocks.1.hook_attn_out", lambda x, hook: 0.5 * x)], False),
    "zero head 0 in z": (
        [("blocks.1.attn.hook_z", lambda z, hook: torch.cat([0 * z[..., :1, :], z[..., 1:, :]], -2))],
        True,
    ),
    "negate mlp_out 0": ([("blocks.0.hook_mlp_out", lambda x, hook: -x)], True),
}


@pytest.mark.parametrize("on", ["ResidualGPT", "export"])
@pytest.mark.parametrize("hook", list(HOOKS_UNDER_CACHE))
def test_per_head_decompose_of_a_cache_taken_under_a_hook_is_exact_or_refuses(hook, on):
    fwd_hooks, rebuilds = HOOKS_UNDER_CACHE[hook]
    model = make_model("trained", bias=True)
    runner = model if on == "ResidualGPT" else convert(model)
    with torch.no_grad(), runner.hooks(fwd_hooks=fwd_hooks):
        logits, cache = runner.run_with_cache(tokens())
    stream = cache["blocks.1.hook_resid_post"]
    whole = decompose(cache, "final")  # the whole attn_out is what the stream got: always exact
    assert (whole.total() - stream).abs().max().item() < TOL
    if not rebuilds:
        for call in (
            lambda: decompose(cache, "final", per_head=True),
            lambda: direct_logit_attribution(cache, 3, per_head=True),
        ):
            with pytest.raises(DecompositionError, match=r"layer \d.*intervention on the\s+attention output"):
                call()
        return
    parts = decompose(cache, "final", per_head=True)
    assert (parts.total() - stream).abs().max().item() < TOL, hook
    attr = direct_logit_attribution(cache, 3, per_head=True)
    assert (attr.values.sum(0) - logits[..., 3]).abs().max().item() < 1e-4, hook


# ----------------------------------------------------------------- 5. the self bias, visible to QK analysis

ROUTES_QK = {
    "bias4": ("attention", 4.0),
    "bias+inf": ("attention", math.inf),
    "bias-inf": ("attention", -math.inf),
    "uniform": ("uniform", 0.0),
    "bias0": ("attention", 0.0),
}


@pytest.mark.parametrize("on", ["ResidualGPT", "export"])
@pytest.mark.parametrize("routing", list(ROUTES_QK))
def test_scores_rebuilt_from_q_and_k_include_the_routing(routing, on):
    from interp.reading.scores import attention_scores

    mixer, bias = ROUTES_QK[routing]
    model = make_model("trained", mixer=mixer, self_bias=bias)
    runner = model if on == "ResidualGPT" else convert(model)
    with torch.no_grad():
        _, cache = runner.run_with_cache(tokens())
    for layer in range(2):
        rebuilt = attention_scores(runner, cache["q", layer], cache["k", layer])
        held = cache["attn_scores", layer]
        assert torch.equal(rebuilt.isinf(), held.isinf())
        finite = held.isfinite()
        assert (rebuilt[finite] - held[finite]).abs().max().item() < TOL


QK_OWNERS = {"model": lambda tl: tl, "block 0": lambda tl: tl.blocks[0].attn, "block 1": lambda tl: tl.blocks[1].attn}


@pytest.mark.parametrize("owner", list(QK_OWNERS))
@pytest.mark.parametrize("attr", ["QK", "W_Q", "W_K"])
@pytest.mark.parametrize("routing,warns", [("bias4", True), ("bias-inf", True), ("bias0", False), ("uniform", False)])
def test_qk_of_a_routed_export_warns(routing, warns, attr, owner):
    mixer, bias = ROUTES_QK[routing]
    tl = convert(make_model("random", mixer=mixer, self_bias=bias))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        getattr(QK_OWNERS[owner](tl), attr)
    routing_words = [w for w in record if issubclass(w.category, HiddenRoutingWarning)]
    assert len(routing_words) == (1 if warns else 0), [str(w.message) for w in routing_words]
    if warns and owner != "model":
        assert f"blocks[{owner[-1]}].attn.{attr}" in str(routing_words[0].message)


@pytest.mark.parametrize("routing", ["bias4", "uniform"])
def test_running_a_routed_export_says_nothing_of_the_routing(routing):
    mixer, bias = ROUTES_QK[routing]
    model = make_model("random", mixer=mixer, self_bias=bias)
    tl = convert(model)
    (logits, _), did = warned(HiddenRoutingWarning, tl.run_with_cache, tokens())
    assert not did
    with torch.no_grad():
        assert (logits - model(tokens())).abs().max().item() < TOL


# ----------------------------------------------------------------- 6. documented refusals, generate on text

CACHE_METHODS = [
    "stack_head_results",
    "get_full_resid_decomposition",
    "compute_head_results",
    "get_neuron_results",
    "stack_neuron_results",
]


@pytest.mark.parametrize("method", CACHE_METHODS)
def test_tl_layout_methods_on_residual_gpt_refuse_by_name(method):
    model = make_model("random")
    _, cache = model.run_with_cache(tokens())
    args = (0,) if method == "get_neuron_results" else ()
    with pytest.raises(ToolkitError, match="interp.reading.decompose"):
        getattr(cache, method)(*args)


@pytest.mark.parametrize("name", ["W_O", "W_Q", "QK", "W_U", "b_O"])
def test_tl_weight_names_on_residual_gpt_refuse_by_name(name):
    with pytest.raises(ToolkitError, match="to_hooked_transformer"):
        getattr(make_model("random"), name)
    assert not hasattr(make_model("random"), name)


def test_generate_takes_text_with_a_vocabulary(tmp_path):
    model = make_model("trained")
    save_checkpoint(tmp_path / "c.pt", model, vocab=CHARS)
    loaded = ResidualGPT.from_checkpoint(tmp_path / "c.pt")
    out = loaded.generate("ROMEO:", 5, temperature=0.0)
    ids = torch.tensor([[CHARS.index(c) for c in "ROMEO:"]])
    assert out == "".join(CHARS[i] for i in model.generate(ids, 5, temperature=0.0)[0])


@pytest.mark.parametrize("prompt,match", [("ROMEO:", "no vocabulary"), ([1, 2, 3], "tensor"), ("", "vocabulary")])
def test_generate_without_vocabulary_or_tensor_is_a_clear_error(prompt, match):
    with pytest.raises(ConfigError, match=match):
        make_model("random").generate(prompt, 3)


# ----------------------------------------------------------------- 7. nanoGPT in and out


def reference_forward(sd: dict, args: dict, idx: torch.Tensor) -> torch.Tensor:
    """A GPT-2 forward over nanoGPT's weight names, written here from the architecture (not nanoGPT's code)."""

    def linear(x, name):
        return F.linear(x, sd[f"{name}.weight"], sd.get(f"{name}.bias"))

    def norm(x, name):
        return F.layer_norm(x, x.shape[-1:], sd[f"{name}.weight"], sd.get(f"{name}.bias"), 1e-5)

    b, t = idx.shape
    heads, d = args["n_head"], args["n_embd"]
    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:t]
    for layer in range(args["n_layer"]):
        p = f"transformer.h.{layer}."
        q, k, v = linear(norm(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=-1)
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf).softmax(-1)
        x = x + linear((att @ v).transpose(1, 2).reshape(b, t, d), p + "attn.c_proj")
        x = x + linear(F.gelu(linear(norm(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return norm(x, "transformer.ln_f") @ sd["lm_head.weight"].T


def nanogpt_checkpoint(bias: bool, tied: bool, prefix: str = "", mask_buffer: bool = False) -> dict:
    """What nanoGPT's train.py saves, with random weights of its shapes and names."""
    gen = torch.Generator().manual_seed(3)
    args = dict(n_layer=2, n_head=4, n_embd=32, block_size=16, bias=bias, vocab_size=len(CHARS), dropout=0.2)
    d, v = 32, len(CHARS)

    def r(*shape):
        return 0.2 * torch.randn(*shape, generator=gen)

    sd = {"transformer.wte.weight": r(v, d), "transformer.wpe.weight": r(16, d)}
    shapes = {
        "ln_1": (d,),
        "attn.c_attn": (3 * d, d),
        "attn.c_proj": (d, d),
        "ln_2": (d,),
        "mlp.c_fc": (4 * d, d),
        "mlp.c_proj": (d, 4 * d),
    }
    for layer in range(2):
        for name, shape in shapes.items():
            key = f"transformer.h.{layer}.{name}"
            sd[f"{key}.weight"] = 1 + r(*shape) if name.startswith("ln") else r(*shape)
            if bias:
                sd[f"{key}.bias"] = r(shape[0])
        if mask_buffer:
            sd[f"transformer.h.{layer}.attn.bias"] = torch.ones(16, 16).tril().view(1, 1, 16, 16)
    sd["transformer.ln_f.weight"] = 1 + r(d)
    if bias:
        sd["transformer.ln_f.bias"] = r(d)
    sd["lm_head.weight"] = sd["transformer.wte.weight"] if tied else r(v, d)
    model = {prefix + k: w for k, w in sd.items()}
    return {
        "model": model,
        "optimizer": {},
        "model_args": args,
        "iter_num": 100,
        "best_val_loss": torch.tensor(1.5),
        "config": {"dataset": "shakespeare_char", "batch_size": 12},
    }


NANOGPT_CASES = {
    "bias, tied": dict(bias=True, tied=True),
    "no bias, tied": dict(bias=False, tied=True),
    "untied": dict(bias=False, tied=False),
    "torch.compile prefix": dict(bias=True, tied=True, prefix="_orig_mod."),
    "non-flash mask buffer": dict(bias=False, tied=True, mask_buffer=True),
}


@pytest.mark.parametrize("case", list(NANOGPT_CASES))
def test_nanogpt_checkpoint_comes_in_exactly(tmp_path, case):
    payload = nanogpt_checkpoint(**NANOGPT_CASES[case])
    torch.save(payload, tmp_path / "ckpt.pt")
    (tmp_path / "meta.pkl").write_bytes(
        pickle.dumps(
            {"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)), "stoi": {c: i for i, c in enumerate(CHARS)}}
        )
    )
    sd = {k.removeprefix("_orig_mod."): v for k, v in payload["model"].items()}
    toks = tokens()
    expected = reference_forward(sd, payload["model_args"], toks)
    model = ResidualGPT.from_checkpoint(tmp_path / "ckpt.pt")
    assert not model.training and model.cfg.dropout == 0.2 and model.cfg.tie_embeddings == NANOGPT_CASES[case]["tied"]
    with torch.no_grad():
        assert (model(toks) - expected).abs().max().item() < TOL
        tl = quiet(hooked.to_hooked_transformer, tmp_path / "ckpt.pt")
        # center_unembed (the export's default, from_pretrained's) shifts each position's logits by a constant
        assert (tl(toks).log_softmax(-1) - expected.log_softmax(-1)).abs().max().item() < TOL
    assert tl.tokenizer is not None and model.generate("ROMEO:", 3, temperature=0.0).startswith("ROMEO:")


@pytest.mark.parametrize("cli", ["sample", "plot_attention"])
def test_nanogpt_checkpoint_through_the_clis(tmp_path, cli, capsys):
    from interp import plot_attention, sample

    torch.save(nanogpt_checkpoint(bias=True, tied=True), tmp_path / "ckpt.pt")
    data = tmp_path / "data" / "shakespeare_char"  # where nanoGPT's sample.py looks (from the repo root)
    data.mkdir(parents=True)
    (data / "meta.pkl").write_bytes(
        pickle.dumps(
            {"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)), "stoi": {c: i for i, c in enumerate(CHARS)}}
        )
    )
    (tmp_path / "out").mkdir()
    ckpt = tmp_path / "out" / "ckpt.pt"
    (tmp_path / "ckpt.pt").rename(ckpt)
    if cli == "sample":
        assert (
            sample.main(["--ckpt", str(ckpt), "--prompt", "ROMEO:", "--max-new-tokens", "4", "--temperature", "0"]) == 0
        )
        assert capsys.readouterr().out.startswith("ROMEO:")
    else:
        assert plot_attention.main(["--ckpt", str(ckpt), "--text", "ROMEO:", "--out", str(tmp_path / "a.html")]) == 0
        assert (tmp_path / "a.html").is_file()


def test_unknown_dict_checkpoint_says_what_it_holds(tmp_path):
    torch.save({"weights_only": 1, "something": 2}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="nor a nanoGPT one"):
        load_checkpoint(tmp_path / "c.pt")


@pytest.mark.parametrize("bias", [True, False])
def test_residual_gpt_goes_out_as_nanogpt(tmp_path, bias):
    from interp.nanogpt import to_nanogpt

    model = make_model("trained", bias=bias, runtime_gain=1.5)
    payload = to_nanogpt(model)
    torch.save(payload, tmp_path / "n.pt")
    back = torch.load(tmp_path / "n.pt", weights_only=True)  # what sample.py reads: model_args + model
    sd, args = back["model"], back["model_args"]
    assert set(args) == {"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout"}
    toks = tokens()
    with torch.no_grad():
        assert (reference_forward(sd, args, toks) - model(toks)).abs().max().item() < TOL


@pytest.mark.parametrize(
    "changes,match",
    [
        (dict(residual="attn_only"), "residual='attn_only'"),
        (dict(residual="ffn_only"), "residual='ffn_only'"),
        (dict(mixer="uniform"), "mixer='uniform'"),
        (dict(mixer="position_blind"), "mixer='position_blind'"),
        (dict(self_bias=4.0), "self_bias=4"),
        (dict(tie_embeddings=False), "tie_embeddings=False"),
        (dict(d_mlp=48), "d_mlp=48"),
    ],
)
def test_what_nanogpt_cannot_express_is_refused_by_name(tmp_path, changes, match, capsys):
    from interp import nanogpt

    model = ResidualGPT(tiny_config(**changes))
    with pytest.raises(ConfigError, match=match):
        nanogpt.to_nanogpt(model)
    save_checkpoint(tmp_path / "c.pt", model, vocab=CHARS)
    assert nanogpt.main(["--ckpt", str(tmp_path / "c.pt"), "--out", str(tmp_path / "n.pt")]) == 2
    assert match in capsys.readouterr().err and not (tmp_path / "n.pt").exists()


def test_a_character_model_goes_out_to_nanogpt_with_the_meta_pkl_its_readers_find(tmp_path, capsys):
    from interp import nanogpt, sample

    save_checkpoint(tmp_path / "c.pt", ResidualGPT(tiny_config()), vocab=CHARS)
    out, meta = tmp_path / "out" / "ckpt.pt", tmp_path / "data" / "tiny" / "meta.pkl"
    read = ["--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "3", "--temperature", "0"]
    assert nanogpt.main(["--ckpt", str(tmp_path / "c.pt"), "--out", str(out)]) == 0
    assert "--dataset NAME --meta-out data/NAME/meta.pkl" in capsys.readouterr().err  # characters left behind
    assert sample.main(read) == 2
    assert "give its meta.pkl (--meta" in capsys.readouterr().err
    # a meta.pkl without --dataset is one nothing would find: refused before anything is written
    other = tmp_path / "other" / "ckpt.pt"
    assert nanogpt.main(["--ckpt", str(tmp_path / "c.pt"), "--out", str(other), "--meta-out", str(meta)]) == 2
    assert "no reader looks there (give --dataset" in capsys.readouterr().err
    assert not other.exists() and not meta.exists()
    argv = ["--ckpt", str(tmp_path / "c.pt"), "--out", str(out), "--dataset", "tiny", "--meta-out", str(meta)]
    assert nanogpt.main(argv) == 0 and meta.is_file()
    capsys.readouterr()
    assert sample.main(read) == 0 and capsys.readouterr().out.startswith("ROMEO:")
    assert nanogpt.main(argv) == 0  # the same vocabulary there already: left as it is


def test_a_nanogpt_export_never_overwrites_or_mismatches_a_vocabulary(tmp_path, capsys, monkeypatch):
    """Another model's meta.pkl where --meta-out points is never replaced; a meta.pkl that cannot be written
    leaves --out as it was; a same-size vocabulary of other characters is refused when read back; --meta on a
    checkpoint of ours is refused, not passed over; beside --out, no --dataset is needed."""
    from interp import nanogpt, sample

    save_checkpoint(tmp_path / "c.pt", ResidualGPT(tiny_config()), vocab=CHARS)
    out, meta = tmp_path / "out" / "ckpt.pt", tmp_path / "data" / "tiny" / "meta.pkl"
    argv = ["--ckpt", str(tmp_path / "c.pt"), "--out", str(out), "--dataset", "tiny", "--meta-out", str(meta)]
    rotated = CHARS[1:] + CHARS[:1]
    save_checkpoint(tmp_path / "r.pt", ResidualGPT(tiny_config()), vocab=rotated)
    other = ["--ckpt", str(tmp_path / "r.pt"), "--out", str(tmp_path / "r" / "ckpt.pt"), "--meta-out"]
    assert nanogpt.main([*other, str(tmp_path / "r" / "meta.pkl")]) == 0  # beside --out, no --dataset
    assert "found by interp.sample beside" in capsys.readouterr().err
    meta.parent.mkdir(parents=True)
    meta.write_bytes((tmp_path / "r" / "meta.pkl").read_bytes())  # another model's vocabulary stands there
    out.parent.mkdir()
    out.write_bytes(b"precious")
    assert nanogpt.main(argv) == 2
    assert "holds another vocabulary: never overwritten" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    missing = ["--meta-out", str(tmp_path / "nowhere" / "data" / "tiny" / "meta.pkl")]
    assert nanogpt.main([*argv[:-2], *missing]) == 2 and out.read_bytes() == b"precious"
    capsys.readouterr()
    blocked = tmp_path / "blocked"  # data/ is a file here: meta.pkl cannot be written, and --out stays as it was
    blocked.mkdir()
    (blocked / "data").write_text("not a folder")
    monkeypatch.chdir(blocked)
    assert nanogpt.main([*argv[:-2], "--meta-out", "data/tiny/meta.pkl"]) == 2 and out.read_bytes() == b"precious"
    assert "error:" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    meta.unlink()
    assert nanogpt.main(argv) == 0
    read = ["--ckpt", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "3", "--temperature", "0"]
    assert sample.main([*read, "--meta", str(tmp_path / "r" / "meta.pkl")]) == 2
    assert "is another model's vocabulary" in capsys.readouterr().err
    assert sample.main(["--ckpt", str(tmp_path / "c.pt"), *read[2:], "--meta", str(meta)]) == 2
    assert "carries its own vocabulary" in capsys.readouterr().err


# ----------------------------------------------------------------- 8. past n_ctx, BOS, the README


@pytest.mark.parametrize("prompt_len,n_new", [(6, 20), (16, 5), (20, 4), (3, 13)])
def test_generating_past_n_ctx_crops_alike(prompt_len, n_new):
    model = make_model("trained")
    tl = convert(model)
    prompt = tokens(batch=2, n=prompt_len)
    expected = model.generate(prompt, n_new, temperature=0.0)
    got = tl.generate(prompt, max_new_tokens=n_new, do_sample=False, verbose=False, stop_at_eos=False)
    assert got.tolist() == expected.tolist()


def test_generating_text_past_n_ctx_crops_alike():
    model = make_model("trained")
    tl = convert(model)
    ids = torch.tensor([[CHARS.index(c) for c in "ROMEO:"]])
    expected = "".join(CHARS[i] for i in model.generate(ids, 20, temperature=0.0)[0])
    assert tl.generate("ROMEO:", max_new_tokens=20, do_sample=False, verbose=False) == expected


BOS_CALLS = {
    "to_tokens": lambda tl: tl.to_tokens("ROMEO:", prepend_bos=True),
    "forward": lambda tl: tl("ROMEO:", prepend_bos=True),
    "run_with_cache": lambda tl: tl.run_with_cache("ROMEO:", prepend_bos=True),
    "generate": lambda tl: tl.generate("ROMEO:", max_new_tokens=2, prepend_bos=True, verbose=False),
    "to_str_tokens": lambda tl: tl.to_str_tokens("ROMEO:", prepend_bos=True),
    "default_prepend_bos": lambda tl: (setattr(tl.cfg, "default_prepend_bos", True), tl("ROMEO:")),
}


@pytest.mark.parametrize("call", list(BOS_CALLS))
def test_prepend_bos_on_the_export_warns(call):
    tl = convert(make_model("trained"))
    _, did = warned(UntrainedTokenWarning, BOS_CALLS[call], tl)
    assert did


def test_no_bos_no_word():
    tl = convert(make_model("trained"))
    _, did = warned(UntrainedTokenWarning, tl, "ROMEO:")
    assert not did


def test_readme_decompose_line_is_right():
    readme = (REPO / "README.md").read_text()
    assert "parts.values" not in readme and "parts.stack.sum(0)" in readme
    model = make_model("trained", residual="attn_only")
    _, cache = model.run_with_cache(tokens())
    parts = decompose(cache, "final", per_head=True)
    assert (parts.stack.sum(0) - cache["blocks.1.hook_resid_post"]).abs().max().item() < TOL


# ----------------------------------------------------------------- 9. neighbours an audit found (audit 25b)


def _steer(site):
    vec = torch.randn(32, generator=torch.Generator().manual_seed(0)) * 3
    return [(site, lambda x, hook: x + vec)]


@pytest.mark.parametrize("site", ["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_mid"])
@pytest.mark.parametrize("on", ["residual_gpt", "export"])
def test_decompose_of_a_cache_taken_under_a_steering_hook_refuses(site, on):
    model = make_model("trained")
    target = model if on == "residual_gpt" else convert(model)
    with target.hooks(fwd_hooks=_steer(site)):
        logits, cache = quiet(target.run_with_cache, tokens())
    with pytest.raises(DecompositionError, match="a hook changed the residual stream"):
        decompose(cache, "final")
    with pytest.raises(DecompositionError, match="a hook changed the residual stream"):
        direct_logit_attribution(cache, 3, 5)


@pytest.mark.parametrize("bad", ["ROMEO:", [1, 2, 3], None])
@pytest.mark.parametrize("call", ["forward", "run_with_cache"])
def test_residual_gpt_given_anything_but_token_ids_names_the_codec(bad, call):
    model = make_model("trained")
    with pytest.raises(ConfigError, match="model.codec.encode"):
        model(bad) if call == "forward" else model.run_with_cache(bad)


def test_nanogpt_masked_targets_are_left_out_of_the_loss():
    model = make_model("trained")
    x = tokens()
    y = x.clone()
    y[:, :3] = -1
    _, loss = model(x, y)
    want = F.cross_entropy(model(x)[:, 3:].flatten(0, 1), y[:, 3:].flatten())
    assert abs(loss.item() - want.item()) < 1e-6


def test_a_sliced_cache_of_an_ablated_model_still_refuses():
    model = make_model("trained", residual="attn_only")
    _, cache = model.run_with_cache(tokens())
    with pytest.raises(ToolkitError, match="interp.reading.decompose"):
        cache.apply_slice_to_batch_dim(slice(0, 1)).decompose_resid()


def test_a_save_hooked_file_given_to_a_checkpoint_loader_names_load_hooked(tmp_path):
    tl = convert(make_model("trained", residual="attn_only"))
    save_hooked(tl, tmp_path / "x.tl.pt")
    for load in (load_checkpoint, ResidualGPT.from_checkpoint, hooked.to_hooked_transformer):
        with pytest.raises(CheckpointError, match=r"interp\.load_hooked"):
            quiet(load, tmp_path / "x.tl.pt")


def test_train_mode_warning_sees_hooks_on_any_submodule():
    model = ResidualGPT(tiny_config(dropout=0.2)).train()
    handle = model.blocks[1].register_forward_hook(lambda module, args, out: None)
    _, did = warned(TrainModeWarning, model, tokens())
    handle.remove()
    assert did
    _, did = warned(TrainModeWarning, model, tokens())  # no hook: a training forward says nothing
    assert not did


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nanogpt_checkpoint_with_non_finite_weights_is_refused_on_import(bad, tmp_path):
    """Every import path checks weights finite, not only the project's own checkpoints (audit 36)."""
    from interp.errors import CheckpointError
    from interp.files.checkpoint import load_checkpoint

    payload = nanogpt_checkpoint(bias=True, tied=True)
    payload["model"]["transformer.h.1.mlp.c_fc.weight"][0, 0] = bad
    torch.save(payload, tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match=r"holds non-finite weights \(blocks\.1\.mlp"):
        load_checkpoint(tmp_path / "ckpt.pt")
    with pytest.raises(CheckpointError, match="non-finite"):
        ResidualGPT.from_checkpoint(tmp_path / "ckpt.pt")
