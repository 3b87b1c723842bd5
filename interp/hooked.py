"""A ResidualGPT as a TransformerLens HookedTransformer that computes the same function.

The weights move into TL's layout one to one. What TL's block cannot express is
put back by swapping a few of its HookPoints for subclasses that do the work in
their forward, i.e. before any hook (user, cache, permanent) sees the value:

    attention routing  hook_attn_scores applies self_bias / the uniform mixer to
                       the causally masked scores, exactly as ResidualGPT's
                       hook_attn_scores holds them;
    removed residual   hook_attn_out / hook_mlp_out record their output after all
                       hooks ran, and hook_resid_mid / hook_resid_post return that
                       record in place of TL's resid + out.

Being modules rather than hook functions, these survive model.reset_hooks()
(even including_permanent=True), always run first, and see a user's patch of
hook_attn_out, so interventions compose as they do on ResidualGPT.
runtime_gain is folded into W_O / b_O and W_out / b_out.

The rewiring lives in the module tree. So that it cannot be lost silently, the
ModelConfig is recorded in TL's config (cfg.residual_gpt_config, and the wiring
in cfg.model_name), and every swapped hook point holds a buffer naming what it
does (e.g. blocks.0.hook_resid_mid.residual_removed): loading a saved state
dict into a plain HookedTransformer then fails with "Unexpected key(s)", and
HookedTransformerConfig.from_dict(cfg.to_dict()) with an unexpected keyword.
save_hooked / load_hooked round-trip an export exactly, tokenizer included.

The position embedding refuses positions past n_ctx (TL would index out of
range, or with to_tokens cut the prompt silently). The character tokenizer
adds one special token, <|endoftext|>, after the characters (EOS, PAD and BOS;
its embedding row is zero and the model never predicts it), so newlines stay
ordinary text for generate, to_string and padding.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from jaxtyping import Float
from torch import Tensor
from transformer_lens import ActivationCache
from transformer_lens.hook_points import HookPoint

from interp.checkpoint import SCHEMA, Checkpoint, load_checkpoint
from interp.config import ModelConfig
from interp.errors import CheckpointError, ConfigError, ToolkitError
from interp.io import atomic_write
from interp.model import ResidualGPT
from interp.tl_major import HookedTransformer, HookedTransformerConfig, PosEmbed  # 3.x only: ToolkitError on 4.x
from interp.tokenizer import GPT2_VOCAB, SPECIAL, CharTokenizer, char_tokenizer, gpt2_files, gpt2_tokenizer  # noqa: F401
from interp.tokenizer import tokenizer_for as _tokenizer_for

HOOKED_SCHEMA = "residual-gpt-hooked/1"


# --------------------------------------------------------------------------- architecture


class _Slot:
    """One tensor handed from a block's hook_*_out to its hook_resid_* (never a submodule)."""

    value: Tensor | None = None

    def take(self) -> Tensor:
        value, self.value = self.value, None
        if value is None:
            raise RuntimeError("residual rewiring: hook_resid_* ran before its hook_*_out recorded a value")
        return value


class RecordedHookPoint(HookPoint):
    """hook_attn_out / hook_mlp_out that remembers its output after every hook: what the block adds."""

    def __init__(self, slot: _Slot):
        super().__init__()
        self.slot = slot

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = super().__call__(*args, **kwargs)
        self.slot.value = out
        return out


class _KeepSecond(torch.autograd.Function):
    """Return `kept`; `dropped` stays in the graph with a zero gradient.

    A full backward hook on a module fires when the gradient of its input is
    computed, so the discarded TL sum must remain connected for bwd hooks on
    hook_resid_mid / hook_resid_post to run.
    """

    @staticmethod
    def forward(ctx, dropped: Tensor, kept: Tensor) -> Tensor:
        return kept.clone()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(grad), grad


class NoResidualHookPoint(HookPoint):
    """hook_resid_mid / hook_resid_post of a block without that identity path.

    TL's block hands in resid + out; this returns out alone (the recorded
    sublayer output, bit for bit), so every hook sees ResidualGPT's value.
    """

    def __init__(self, slot: _Slot):
        super().__init__()
        self.slot = slot
        # In the state dict, so a plain HookedTransformer refuses it ("Unexpected key(s)").
        self.register_buffer("residual_removed", torch.tensor(True))

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        return _KeepSecond.apply(x, self.slot.take())


class RoutedScoresHookPoint(HookPoint):
    """hook_attn_scores with the routing control applied to TL's causally masked scores.

    self_bias finite: added to each query's score on itself; +inf: every other
    key -inf; -inf: the self key -inf (row 0 is then all -inf and TL turns its
    NaN pattern into zeros, as ResidualGPT does). uniform: every score that is
    not masked becomes 0, whatever W_Q / W_K hold.
    """

    def __init__(self, mixer: str, self_bias: float):
        super().__init__()
        self.mixer = mixer
        self.self_bias = self_bias
        # The routing, in the state dict (a plain HookedTransformer refuses these keys).
        self.register_buffer("routing_self_bias", torch.tensor(self_bias))
        self.register_buffer("routing_uniform", torch.tensor(mixer == "uniform"))

    def extra_repr(self) -> str:
        return f"mixer={self.mixer!r}, self_bias={self.self_bias}"

    def forward(self, scores: Float[Tensor, "batch head q k"]) -> Float[Tensor, "batch head q k"]:
        if self.mixer == "uniform":
            return scores.masked_fill(scores != -math.inf, 0.0)
        n_q, n_k = scores.shape[-2:]
        offset = n_k - n_q  # queries are the last n_q positions when generating with a kv cache
        q_pos = torch.arange(offset, n_k, device=scores.device)
        is_self = q_pos[:, None] == torch.arange(n_k, device=scores.device)[None, :]
        if self.self_bias == math.inf:
            return scores.masked_fill(~is_self, -math.inf)
        if self.self_bias == -math.inf:
            return scores.masked_fill(is_self, -math.inf)
        return scores + self.self_bias * is_self.to(scores.dtype)


def _rewire(model: HookedTransformer, cfg: ModelConfig) -> None:
    """Swap in the hook points above where cfg departs from a plain Pre-LN GPT."""
    for block in model.blocks:
        if cfg.mixer == "uniform" or cfg.self_bias != 0.0:
            block.attn.hook_attn_scores = RoutedScoresHookPoint(cfg.mixer, cfg.self_bias)
        if not cfg.attn_residual:
            slot = _Slot()
            block.hook_attn_out = RecordedHookPoint(slot)
            block.hook_resid_mid = NoResidualHookPoint(slot)
        if not cfg.ffn_residual:
            slot = _Slot()
            block.hook_mlp_out = RecordedHookPoint(slot)
            block.hook_resid_post = NoResidualHookPoint(slot)
    model.setup()  # re-register hook names for the new modules


class ContextCheckedPosEmbed(PosEmbed):
    """TL's PosEmbed that refuses a position past n_ctx with a ConfigError (TL would index out of range)."""

    def forward(self, tokens, past_kv_pos_offset: int = 0, attention_mask=None):
        if attention_mask is None:
            n = tokens.size(-1) + past_kv_pos_offset
        else:  # padded: positions count the attended tokens only
            n = int(attention_mask.sum(-1).max())
        if n > self.cfg.n_ctx:
            raise ConfigError(
                f"sequence length {n} exceeds n_ctx {self.cfg.n_ctx}; with generate, ask for at most n_ctx minus "
                "the prompt length new tokens (ResidualGPT.generate crops to the last n_ctx tokens instead)"
            )
        return super().forward(tokens, past_kv_pos_offset, attention_mask)


def _install(model: HookedTransformer, cfg: ModelConfig) -> None:
    """Everything that makes a plain HookedTransformer this ResidualGPT: rewiring, n_ctx check, the record."""
    guarded = ContextCheckedPosEmbed(model.cfg)
    guarded.W_pos = model.pos_embed.W_pos
    model.pos_embed = guarded
    _rewire(model, cfg)
    model.cfg.residual_gpt_config = cfg.to_dict()  # not a TL field: from_dict(cfg.to_dict()) fails loudly


# --------------------------------------------------------------------------- config and weights


def hooked_config(
    cfg: ModelConfig, device: str | torch.device = "cpu", dtype=torch.float32, n_special: int = 0
) -> HookedTransformerConfig:
    """The HookedTransformerConfig of a ModelConfig (refuses what TL cannot express).

    n_special extra token ids (a tokenizer's special tokens, after the model's
    own) get embedding rows (zero, from the caller) and no logits.
    """
    if cfg.mixer == "position_blind":
        raise ConfigError(
            "mixer='position_blind' has no TransformerLens equivalent (its token mixer is a per-position MLP, "
            "not attention); analyse this checkpoint with ResidualGPT and its own hooks instead"
        )
    return HookedTransformerConfig(
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        n_ctx=cfg.n_ctx,
        d_head=cfg.d_head,
        n_heads=cfg.n_heads,
        d_mlp=cfg.d_mlp,
        d_vocab=cfg.d_vocab + n_special,
        d_vocab_out=cfg.d_vocab,
        act_fn="gelu",  # exact erf GELU, as F.gelu in ResidualGPT
        normalization_type="LN",
        eps=1e-5,
        positional_embedding_type="standard",
        default_prepend_bos=False,  # trained without BOS
        model_name=f"residual-gpt(residual={cfg.residual}, mixer={cfg.mixer}, self_bias={cfg.self_bias:g})",
        original_architecture="ResidualGPT",
        init_weights=False,  # every weight is loaded below
        device=str(device),
        dtype=dtype,
    )


def tl_state_dict(model: ResidualGPT) -> dict[str, Tensor]:
    """ResidualGPT weights in TL's names and layout; every ResidualGPT parameter must be used once."""
    cfg = model.cfg
    params = dict(model.named_parameters())  # tied unembed appears once, as embed.weight
    used: set[str] = set()

    def take(name: str) -> Tensor:
        used.add(name)
        return params[name].detach()

    def optional(name: str, like: Tensor) -> Tensor:
        return take(name) if name in params else torch.zeros_like(like)

    heads = dict(h=cfg.n_heads)
    gain = cfg.runtime_gain  # every sublayer output is scaled: fold it into the writing weights
    embed = take("embed.weight")
    sd: dict[str, Tensor] = {"embed.W_E": embed, "pos_embed.W_pos": take("pos_embed.weight")}
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}."  # the same block prefix in both models
        for ln in ("ln1", "ln2"):
            w = take(f"{b}{ln}.w")
            sd[f"{b}{ln}.w"], sd[f"{b}{ln}.b"] = w, optional(f"{b}{ln}.b", w)

        w_in = take(f"{b}attn.in_proj.weight")  # [3d or d, d]: rows are (h dh) outputs
        b_in = optional(f"{b}attn.in_proj.bias", w_in[:, 0])
        if cfg.mixer == "attention":
            (w_q, w_k, w_v), (b_q, b_k, b_v) = w_in.chunk(3), b_in.chunk(3)
        else:  # uniform: a value projection only; no content-based scores
            w_v, b_v = w_in, b_in
            w_q = w_k = torch.zeros_like(w_v)
            b_q = b_k = torch.zeros_like(b_v)
        for name, w, bias in (("Q", w_q, b_q), ("K", w_k, b_k), ("V", w_v, b_v)):
            sd[f"{b}attn.W_{name}"] = rearrange(w, "(h dh) d -> h d dh", **heads)
            sd[f"{b}attn.b_{name}"] = rearrange(bias, "(h dh) -> h dh", **heads)
        w_o = take(f"{b}attn.out_proj.weight")
        sd[f"{b}attn.W_O"] = rearrange(w_o, "d (h dh) -> h dh d", **heads) * gain
        sd[f"{b}attn.b_O"] = optional(f"{b}attn.out_proj.bias", w_o[:, 0]) * gain

        w_in = take(f"{b}mlp.in_proj.weight")
        sd[f"{b}mlp.W_in"] = w_in.T
        sd[f"{b}mlp.b_in"] = optional(f"{b}mlp.in_proj.bias", w_in[:, 0])
        w_out = take(f"{b}mlp.out_proj.weight")
        sd[f"{b}mlp.W_out"] = w_out.T * gain
        sd[f"{b}mlp.b_out"] = optional(f"{b}mlp.out_proj.bias", w_out[:, 0]) * gain

    w = take("ln_final.w")
    sd["ln_final.w"], sd["ln_final.b"] = w, optional("ln_final.b", w)
    w_u = take("unembed.weight") if "unembed.weight" in params else embed  # tied: a copy either way
    sd["unembed.W_U"] = w_u.T
    sd["unembed.b_U"] = torch.zeros(cfg.d_vocab, dtype=w_u.dtype, device=w_u.device)

    unused = sorted(set(params) - used)
    if unused:
        raise ToolkitError(f"to_hooked_transformer does not know where to put ResidualGPT parameter(s) {unused}")
    return {k: v.contiguous() for k, v in sd.items()}


# --------------------------------------------------------------------------- inputs


def model_from_checkpoint(ckpt: Checkpoint, device: str | torch.device | None = None) -> ResidualGPT:
    """The checkpoint's ResidualGPT in eval mode; weights must fit its config exactly (strict)."""
    model = ResidualGPT.from_checkpoint(ckpt)
    return (model.to(device) if device is not None else model).eval()


def _resolve(source: Any, device: str | torch.device | None) -> tuple[ResidualGPT, dict[str, Any]]:
    """A ResidualGPT and the checkpoint's extra state (vocab, encoding, ...)."""
    if isinstance(source, ResidualGPT):
        return source, {}
    if isinstance(getattr(source, "module", None), ResidualGPT):  # DDP
        return source.module, {}
    if isinstance(source, (str, os.PathLike)):
        source = load_checkpoint(source, map_location=device or "cpu")
    if not isinstance(source, Checkpoint):
        raise ToolkitError(
            f"to_hooked_transformer takes a ResidualGPT, a Checkpoint or a checkpoint path, not {type(source).__name__}"
        )
    return model_from_checkpoint(source, device), dict(source.state)


# --------------------------------------------------------------------------- entry point


class NonAdditiveResidualWarning(UserWarning):
    """A TransformerLens method that assumes resid = embeddings + every sublayer output, on a model where it is not."""


warnings.filterwarnings("always", category=NonAdditiveResidualWarning)  # every call, not once per line

_ADDITIVE_METHODS = ("decompose_resid", "get_full_resid_decomposition", "stack_head_results", "logit_attrs")


def _non_additive_message(residual: str, method: str) -> str:
    return (
        f"residual={residual!r}: ActivationCache.{method} assumes the residual stream is the sum of the embeddings "
        "and every sublayer output, which a removed residual path breaks, so its stacks do not sum to the stream "
        "(and their logit attributions not to the logit). Use interp.decompose.decompose / "
        "direct_logit_attribution, which follow this model's wiring. accumulated_resid and the logit lens read the "
        "stream itself and are right."
    )


class NonAdditiveCache(ActivationCache):
    """The ActivationCache of an export with a removed residual path: the additive methods warn at every call."""

    _depth = 0  # nested calls (get_full_resid_decomposition -> stack_head_results) warn once

    def _warn_then(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._depth == 0:
            residual = getattr(self.model, "residual_config", "ablated")
            warnings.warn(_non_additive_message(residual, method), NonAdditiveResidualWarning, stacklevel=3)
        self._depth += 1
        try:
            return getattr(super(), method)(*args, **kwargs)
        finally:
            self._depth -= 1

    def decompose_resid(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("decompose_resid", *args, **kwargs)

    def get_full_resid_decomposition(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("get_full_resid_decomposition", *args, **kwargs)

    def stack_head_results(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("stack_head_results", *args, **kwargs)

    def logit_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._warn_then("logit_attrs", *args, **kwargs)

    def apply_slice_to_batch_dim(self, batch_slice: Any) -> ActivationCache:
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return NonAdditiveCache(sliced.cache_dict, sliced.model, has_batch_dim=sliced.has_batch_dim)


class NonAdditiveHookedTransformer(HookedTransformer):
    """An export with a removed residual path: run_with_cache returns a NonAdditiveCache."""

    residual_config = "ablated"

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> Any:
        out, cache = super().run_with_cache(*model_args, **kwargs)
        if isinstance(cache, ActivationCache):
            cache = NonAdditiveCache(cache.cache_dict, self, has_batch_dim=cache.has_batch_dim)
        return out, cache


def _mark_non_additive(model: HookedTransformer, cfg: ModelConfig) -> None:
    """Warn now, and make every later cache of this model warn on each additive method."""
    if cfg.residual == "full":
        return
    model.__class__ = NonAdditiveHookedTransformer
    model.residual_config = cfg.residual
    warnings.warn(
        f"residual={cfg.residual!r}: the residual stream is not the sum of the embeddings and every sublayer output; "
        f"TransformerLens's {', '.join(_ADDITIVE_METHODS)} warn at every call on this model's caches. "
        "interp.decompose gives the exact decomposition and direct logit attribution for this wiring",
        NonAdditiveResidualWarning,
        stacklevel=3,
    )


def to_hooked_transformer(
    source: ResidualGPT | Checkpoint | str | os.PathLike,
    *,
    vocab: list[str] | None = None,
    fold_ln: bool = False,
    center_writing_weights: bool = False,
    center_unembed: bool = False,
    fold_value_biases: bool = False,
    refactor_factored_attn_matrices: bool = False,
    device: str | torch.device | None = None,
) -> HookedTransformer:
    """A ResidualGPT, Checkpoint or checkpoint path as a HookedTransformer with the same logits and caches.

    Processing is off by default so hook values equal ResidualGPT's; the TL
    processing flags keep log-probabilities (center_unembed shifts logits).

    TL's cache.logit_attrs needs fold_ln=True even for residual='full': it
    centres the stack and divides by the cached ln_final scale, then dots with
    W_U's columns, but never multiplies by ln_final.w (nor adds ln_final.b).
    Only when fold_ln has moved w into W_U (and b into b_U) do the
    attributions sum to the logit; without it they are off by w, and a trained
    w is far from 1. interp.decompose.direct_logit_attribution applies w and b
    itself and is exact with or without fold_ln, for every residual config.

    For residual != 'full' the model is a NonAdditiveHookedTransformer: its
    caches warn (NonAdditiveResidualWarning) at every call of decompose_resid,
    get_full_resid_decomposition, stack_head_results and logit_attrs, whose
    sums assume every sublayer output reaches the final stream; use
    interp.decompose there. accumulated_resid and the logit lens read the
    stream itself and stay right.
    vocab (a list of characters) or the checkpoint's state["vocab"] /
    state["encoding"] == "gpt2" gives the attached tokenizer.
    """
    model, state = _resolve(source, device)
    cfg = model.cfg
    if fold_value_biases and cfg.bias and cfg.self_bias == -math.inf:
        raise ConfigError(
            "fold_value_biases assumes every attention row sums to 1, but with self_bias=-inf position 0 attends "
            "nowhere; leave fold_value_biases off for this model"
        )
    tokenizer, why_not = _tokenizer_for(cfg, vocab, state)
    n_special = len(tokenizer) - cfg.d_vocab if tokenizer is not None else 0
    weight = model.embed.weight
    tl_cfg = hooked_config(cfg, device=device or weight.device, dtype=weight.dtype, n_special=n_special)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TL 3.x nudges towards TransformerBridge
        hooked = HookedTransformer(tl_cfg)
    state_dict = tl_state_dict(model)
    if n_special:  # rows for the tokenizer's special token(s): zero, never trained, never predicted
        w_e = state_dict["embed.W_E"]
        state_dict["embed.W_E"] = torch.cat([w_e, w_e.new_zeros(n_special, w_e.shape[1])])
    state_dict.update(hooked.named_buffers())  # TL's constants (mask cache, IGNORE = -inf), not weights
    try:
        hooked.load_state_dict(state_dict, strict=True)
    except RuntimeError as e:  # a key or shape we produced that TL does not expect: a converter bug
        raise ToolkitError(f"TransformerLens rejected the converted weights: {e}") from None
    _install(hooked, cfg)
    if fold_ln or center_writing_weights or center_unembed or fold_value_biases or refactor_factored_attn_matrices:
        hooked.load_and_process_state_dict(
            hooked.state_dict(),
            fold_ln=fold_ln,
            center_writing_weights=center_writing_weights,
            center_unembed=center_unembed,
            fold_value_biases=fold_value_biases,
            refactor_factored_attn_matrices=refactor_factored_attn_matrices,
        )
    if tokenizer is not None:
        hooked.set_tokenizer(tokenizer, default_padding_side="right")
    else:
        warnings.warn(f"no tokenizer attached: {why_not}; the model takes token tensors only", stacklevel=2)
    _mark_non_additive(hooked, cfg)
    return hooked.eval()


# --------------------------------------------------------------------------- saving


def _tl_config_dict(cfg: HookedTransformerConfig) -> dict[str, Any]:
    """TL's config as plain data: its __init__ fields, dtype and device as strings, numpy scalars as Python's."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(HookedTransformerConfig):
        if f.init and hasattr(cfg, f.name):
            value = getattr(cfg, f.name)
            if f.name in ("dtype", "device"):
                value = str(value).removeprefix("torch.")
            elif hasattr(value, "item") and not isinstance(value, Tensor):  # numpy scalars (initializer_range)
                value = value.item()
            out[f.name] = value
    return out


def save_hooked(model: HookedTransformer, path: str | os.PathLike) -> None:
    """Save an export from to_hooked_transformer (weights, TL config, wiring, tokenizer) for load_hooked.

    Plain data only (read back with weights_only=True), written atomically.
    """
    record = getattr(model.cfg, "residual_gpt_config", None)
    if record is None:
        raise ToolkitError("save_hooked takes a model made by interp.to_hooked_transformer (no residual_gpt_config)")
    tokenizer = model.tokenizer
    chars = getattr(tokenizer, "chars", None)
    payload = {
        "schema": HOOKED_SCHEMA,
        "model_config": dict(record),
        "tl_config": _tl_config_dict(model.cfg),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "vocab": list(chars) if chars else None,
        "encoding": "gpt2" if tokenizer is not None and not chars and len(tokenizer) == GPT2_VOCAB else None,
    }
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_hooked(path: str | os.PathLike, device: str | torch.device | None = None) -> HookedTransformer:
    """The HookedTransformer that save_hooked wrote, wiring and tokenizer included (strict: every key must fit)."""
    import pickle

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no saved HookedTransformer at {path}")
    try:
        payload = torch.load(path, map_location=device or "cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable save_hooked file: {str(e).splitlines()[0]}") from None
    schema = payload.get("schema") if isinstance(payload, dict) else None
    if schema != HOOKED_SCHEMA:
        hint = " (a ResidualGPT checkpoint: use to_hooked_transformer)" if schema == SCHEMA else ""
        raise CheckpointError(f"{path} has schema {schema!r}; load_hooked reads {HOOKED_SCHEMA!r}{hint}")
    cfg = ModelConfig.from_dict(payload["model_config"])
    fields = dict(payload["tl_config"])
    fields["dtype"] = getattr(torch, fields["dtype"])
    if device is not None:
        fields["device"] = str(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        hooked = HookedTransformer(HookedTransformerConfig(**fields))
    _install(hooked, cfg)
    try:
        hooked.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        detail = " ".join(line.strip() for line in str(e).splitlines()[1:])
        raise CheckpointError(f"{path}: weights do not match the saved configuration: {detail}") from None
    if payload.get("vocab") is not None:
        hooked.set_tokenizer(char_tokenizer(payload["vocab"]), default_padding_side="right")
    elif payload.get("encoding") == "gpt2" and gpt2_files() is not None:
        hooked.set_tokenizer(gpt2_tokenizer(), default_padding_side="right")
    _mark_non_additive(hooked, cfg)
    return hooked.eval()
