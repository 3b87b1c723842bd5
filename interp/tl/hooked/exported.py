"""The HookedTransformer class every export is: TL's, plus a word (or the right answer) where a TL habit misleads.

    logit_attrs     TL's leaves out ln_final.w (no fold_ln) and b_U: it warns at each call
                    (LogitAttrsWarning) unless both are trivial, naming fold_ln=True
                    and interp.reading.decompose.direct_logit_attribution.
    apply_ln_to_stack, tokens_to_residual_directions and every apply_ln=True
                    right only with the LayerNorm weights folded (fold_ln=True, the default): with
                    fold_ln=False they warn at each call (UnfoldedLayerNormWarning), on a cache built
                    by hand too (interp.tl.stream_reads). Where b_U is not zero (fold_ln puts a bias=True
                    model's ln_final.b there) a stack dotted with W_U misses it: they warn at each call
                    (UnembedBiasWarning) at the unembedding.
    load_and_process_state_dict, process_weights_
                    TL's defaults fold value biases (b_V into b_O), which the export leaves off: where a
                    b_V is not zero, hook_v / hook_z then lack it and a zero-ablation there is not
                    ResidualGPT's: ValueBiasWarning at each such call (to_hooked_transformer's opt-in too);
                    the layers are remembered (value_biases_moved; save_hooked keeps them, load_hooked warns).
                    A float64 state dict is processed in float64 (TL 3.9 rounds it through float32).
    tokens on the meta device: one ShapeError (TL's copy to the model's device would fail obscurely).
    an empty prompt ('', TL's default input of generate, or tokens with no positions): one ShapeError, as on
                    ResidualGPT (TL returns (batch, 0, d_vocab) logits and a NaN loss, or an IndexError).
    generate        interp.tl.hooked.generation (its base class): past n_ctx cropped as nanoGPT's,
                    max_new_tokens=0 the prompt, an empty prompt refused, padding warned.
    state_dict      of a rewired export (a residual removed, a routing in hook_attn_scores) asked for by
                    user code: a WeightsOnlyStateDict, which warns WeightsOnlyWarning when anything but an
                    export of the same ModelConfig reads it. The wiring lives in hook points; a plain
                    HookedTransformer takes the weights with strict=False, assign=True or by hand
                    and computes a full-residual, plain-attention model. save_hooked / load_hooked
                    keep it. (A strict load_state_dict refuses: the marker buffers are unexpected.)
    blocks[l].attn.QK, W_Q, W_K
                    with a routing in hook_attn_scores (self_bias, uniform) they do not show it:
                    HiddenRoutingWarning, naming interp.reading.scores.attention_scores (rewire.RoutedAttention).

The guards it shares with the TL 4 bridge are written once, in interp.tl.guards: to_tokens (past n_ctx, BOS),
to_string and tokens_to_residual_directions (ids outside the vocabulary), loss (padding), the model's QK / W_Q / W_K.
TransformerLens has no dropout, so an export's cache is the same in train and eval mode.
"""

from __future__ import annotations

import inspect
import sys
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from transformer_lens import HookedTransformer

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ValueBiasWarning, WeightsOnlyWarning, frame_module, warn_each_call
from interp.model.activation_cache import NamedCache
from interp.model.api import BoundaryHooks
from interp.tl import stream_reads
from interp.tl.guards import ExportGuards
from interp.tl.hooked.fold import fold_layer_norms
from interp.tl.hooked.generation import ExportGenerate, refuse_empty
from interp.tl.hooked.rewire import ROUTING_APPLIED_BY
from interp.tl.hooked.sae_methods import SAEMethods
from interp.tl.tokens import refuse_meta, special_before_text, warn_unmasked_left_padding

stream_reads.install()  # TL's cache methods ask the export (_check_stream_read) at every call


def _nonzero(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and bool(t.detach().ne(0).any())


def logit_attrs_gap(model: Any) -> str | None:
    """What TL's logit_attrs leaves out on this model (ln_final.w, ln_final.b, b_U), or None if nothing."""
    ln = getattr(model, "ln_final", None)
    w, b = getattr(ln, "w", None), getattr(ln, "b", None)
    missing = []
    if isinstance(w, torch.Tensor) and bool(w.detach().ne(1).any()):
        missing.append("ln_final.w (export with fold_ln=True to move it into W_U)")
    if _nonzero(b):
        missing.append("ln_final.b")
    if _nonzero(getattr(model, "b_U", None)):
        missing.append("b_U (where fold_ln puts ln_final.b)")
    return "; ".join(missing) or None


class ExportCache(NamedCache):
    """An export's ActivationCache: a missing name is named with the closest ones, and slicing keeps the class.

    What its methods would answer wrongly (logit_attrs without fold_ln, a LayerNorm's scale without its weight,
    a sum on a removed residual) the export checks at every call, for a cache built by hand too
    (ExportedHookedTransformer._check_stream_read, interp.tl.stream_reads)."""


def _computes(cfg: ModelConfig) -> dict[str, Any]:
    """What a ModelConfig says the forward computes (how it was initialised and its training dropout aside)."""
    return {k: v for k, v in cfg.to_dict().items() if k not in ("init_std", "dropout")}


class WeightsOnlyStateDict(OrderedDict):
    """A rewired export's state_dict(): the weights without the wiring. The first read by anything but an
    export of the same ModelConfig (a plain HookedTransformer's load_state_dict, a copy by hand, torch.save)
    warns WeightsOnlyWarning; loaded back into such an export it is exact and says nothing. Pickles as a
    plain OrderedDict, so torch.load(weights_only=True) reads what torch.save wrote."""

    def __init__(self, weights: Any, config: dict[str, Any], message: str):
        super().__init__(weights)
        self.__dict__.update(getattr(weights, "__dict__", {}))  # torch's _metadata (version of each module)
        self.config, self.message, self.quiet = config, message, 0

    def _read(self) -> None:
        if not self.quiet and self.message:
            message, self.message = self.message, ""
            warn_each_call(message, WeightsOnlyWarning)  # at the load's own line, every load (not torch's, once)

    def copy(self) -> Any:
        self._read()
        out = OrderedDict(super().items())
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k == "_metadata"})
        return out

    def __reduce__(self) -> Any:
        self._read()
        state = {k: v for k, v in self.__dict__.items() if k == "_metadata"}
        return (OrderedDict, (), state or None, None, iter(list(super().items())))


def _reading(name: str) -> Any:
    """OrderedDict's method `name`, warning first (WeightsOnlyStateDict._read)."""
    plain = getattr(OrderedDict, name)

    def method(self: WeightsOnlyStateDict, *args: Any, **kwargs: Any) -> Any:
        self._read()
        return plain(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


# Every way to read the weights warns; copy and pickling (__reduce__) are written out above.
_READS = ("__getitem__", "__iter__", "__reversed__", "keys", "items", "values", "get", "pop", "popitem", "setdefault")
for _name in _READS:
    setattr(WeightsOnlyStateDict, _name, _reading(_name))


# Libraries that call state_dict() for their own bookkeeping (TL's weight processing, torch, nnsight): no word
_QUIET_CALLERS = ("transformer_lens", "torch", "interp", "nnsight", "accelerate", "transformers", "copy")
_FORWARD = inspect.signature(HookedTransformer.forward)
_PROCESS = inspect.signature(HookedTransformer.load_and_process_state_dict)


VALUE_BIAS_EFFECT = (
    "hook_v and hook_z (cache['v', l], cache['z', l]) now lack b_V, so reading them or zero-ablating a head there "
    "(v[:, :, h] = 0) is not ResidualGPT's (patching one run's values into another is unaffected)"
)


def _holds_float64(state_dict: dict[str, Any]) -> bool:
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in dict.values(state_dict))


class _KeepFloat64(dict):
    """A float64 state dict for TL 3.9's process_weights, which first casts every tensor that is not float32 to
    float32 (meant for half precision) and back afterwards: that rounded a float64 export to ~4e-7 of its model.
    The cast's copy (the same tensor rounded to float32) is not stored, so the processing runs in float64."""

    def __setitem__(self, key: Any, value: Any) -> None:
        old = dict.get(self, key)
        float32 = isinstance(value, torch.Tensor) and value.dtype == torch.float32
        if float32 and isinstance(old, torch.Tensor) and old.dtype == torch.float64 and torch.equal(value, old.float()):
            return
        super().__setitem__(key, value)


def _moved_value_biases(state_dict: Any, n_layers: int) -> list[int]:
    """The layers whose b_V in `state_dict` is not zero (read past a WeightsOnlyStateDict's word: dict.get)."""
    return [layer for layer in range(n_layers) if _nonzero(dict.get(state_dict, f"blocks.{layer}.attn.b_V"))]


class ExportedHookedTransformer(SAEMethods, ExportGuards, BoundaryHooks, ExportGenerate):
    """A ResidualGPT as a HookedTransformer (interp.to_hooked_transformer, load_hooked); see the module docstring.

    SAELens's run_with_saes, add_sae and the rest make it a HookedSAETransformer at the first call
    (interp.tl.hooked.sae_methods).

    The guards it shares with the TL 4 bridge are interp.tl.guards.ExportGuards'. Hook names, names_filter,
    remove_batch_dim and hook returns are checked as on ResidualGPT (interp.model.api.BoundaryHooks); token ids
    at the embedding (rewire.VocabCheckedEmbed)."""

    cache_class: type[ExportCache] = ExportCache

    @property
    def model_config(self) -> ModelConfig:
        """The ResidualGPT ModelConfig this export computes."""
        return ModelConfig.from_dict(self.cfg.residual_gpt_config)  # type: ignore[attr-defined]  # set by rewire.rewire_hooked

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(args[0] if args else kwargs.get("input"), "from_to_tokens", None) == "left":
            arguments = _FORWARD.bind(self, *args, **kwargs).arguments
            warn_unmasked_left_padding(arguments, self.tokenizer, self.cfg.d_vocab_out)
        return super().forward(*args, **kwargs)

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> Any:
        self._check_input(model_args, kwargs, "run_with_cache")
        out, cache = super().run_with_cache(*model_args, **kwargs)
        return out, self.cache_class.of(cache, self)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        out = super().state_dict(*args, **kwargs)
        caller = frame_module(sys._getframe(1))
        if caller.split(".")[0] in _QUIET_CALLERS or not self.rewired() or args or "destination" in kwargs:
            return out
        cfg = self.model_config
        return WeightsOnlyStateDict(
            out,
            _computes(cfg),
            f"this export's state_dict() holds its weights only; its wiring (residual={cfg.residual!r}, "
            f"mixer={cfg.mixer!r}, self_bias={cfg.self_bias:g}) lives in its hook points, so a plain "
            "HookedTransformer that takes these weights (strict=False, assign=True, by hand, "
            "load_and_process_state_dict) computes another model. interp.save_hooked / interp.load_hooked keep "
            "the wiring; an export of the same ModelConfig takes it back exactly and without this word",
        )

    @contextmanager
    def _own_weights(self, state_dict: Any) -> Iterator[None]:
        """Its own kind of weights (an export of the same ModelConfig) are exact here: the dict stays quiet while
        read (load_state_dict, load_and_process_state_dict: the call the ValueBiasWarning names)."""
        same = isinstance(state_dict, WeightsOnlyStateDict) and state_dict.config == _computes(self.model_config)
        if same:
            state_dict.quiet += 1
        try:
            yield
        finally:
            if same:
                state_dict.quiet -= 1

    def load_state_dict(self, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        with self._own_weights(state_dict):
            return super().load_state_dict(state_dict, *args, **kwargs)

    def rewired(self) -> bool:
        """Whether this export computes something a plain HookedTransformer with its weights would not."""
        cfg = self.model_config
        return cfg.residual != "full" or mixer_spec(cfg.mixer).tl_routes_scores(cfg)

    # ------------------------------------------------------------------ this major's part of interp.tl.guards

    unfolded_fix = (
        "export with interp.to_hooked_transformer(..., fold_ln=True) (the default), or use interp.reading.decompose "
        "(decompose, direct_logit_attribution, logit_lens), which applies the LayerNorm weights itself"
    )
    routing_applied_by = ROUTING_APPLIED_BY

    def _logit_attrs_word(self) -> str | None:
        gap = logit_attrs_gap(self)
        if not gap:
            return None
        return (
            f"ActivationCache.logit_attrs leaves out {gap}, so its attributions do not sum to the logit "
            "(difference); interp.reading.decompose.direct_logit_attribution(cache, tokens) applies them and is exact"
        )

    def _padding_mark(self, tokens: torch.Tensor, padding_side: str | None) -> Any:
        """to_tokens' mark, read by rewire.VocabCheckedEmbed, and for left padding by forward (TL masks it only
        when the call says so: warn_unmasked_left_padding)."""
        side = padding_side if padding_side in ("left", "right") else getattr(self.tokenizer, "padding_side", None)
        left = side == "left" and special_before_text(tokens, self.cfg.d_vocab_out)
        return "left" if left else True

    # ------------------------------------------------------------------ weight processing after the export

    def load_and_process_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """TL's, with the LayerNorms folded first where the layout is known (interp.tl.hooked.fold); where it
        moves a nonzero b_V into b_O (fold_value_biases, TL's default here and inside
        process_weights_, or refactor_factored_attn_matrices) a ValueBiasWarning at each call."""
        bound = _PROCESS.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if isinstance(a["state_dict"], dict) and _holds_float64(a["state_dict"]):
            with self._own_weights(a["state_dict"]):  # read once here (a rewired export's word, where due)
                a["state_dict"] = _KeepFloat64(a["state_dict"].items())
            args, kwargs = bound.args[1:], bound.kwargs
        moved = []
        if a["fold_value_biases"] or a["refactor_factored_attn_matrices"]:
            moved = _moved_value_biases(a["state_dict"], self.cfg.n_layers)
        if a["fold_ln"] and self.cfg.normalization_type == "LN" and isinstance(a["state_dict"], dict):
            fold_layer_norms(a["state_dict"], self.cfg.n_layers)  # TL's own fold guesses square layouts wrong
        with self._own_weights(a["state_dict"]):
            out = super().load_and_process_state_dict(*args, **kwargs)
        if moved:
            how = (
                "fold_value_biases=True (TransformerLens's default in load_and_process_state_dict and process_weights_)"
                if a["fold_value_biases"]
                else "refactor_factored_attn_matrices=True"
            )
            # remembered (save_hooked writes it, load_hooked warns): b_V = 0 afterwards looks like bias=False
            self.cfg.residual_gpt_value_biases_moved = sorted({*self.value_biases_moved, *moved})  # type: ignore[attr-defined]
            warn_each_call(
                f"{how} moved the value biases b_V of layer(s) {moved} into b_O, which the export leaves off: "
                f"{VALUE_BIAS_EFFECT}; pass fold_value_biases=False (process_weights_: "
                "load_and_process_state_dict(tl.state_dict(), fold_value_biases=False)) to keep them",
                ValueBiasWarning,
            )
        return out

    @property
    def value_biases_moved(self) -> list[int]:
        """The layers whose b_V weight processing moved into b_O (fold_value_biases) and that still lack it."""
        layers = getattr(self.cfg, "residual_gpt_value_biases_moved", [])
        return [layer for layer in layers if not _nonzero(self.blocks[layer].attn.b_V)]  # a reload puts it back

    # ------------------------------------------------------------------ the token boundary

    def input_to_embed(self, input: Any, *args: Any, **kwargs: Any) -> Any:
        refuse_meta(input)  # before TL's copy to the model's device, which cannot read a meta tensor
        out = super().input_to_embed(input, *args, **kwargs)
        if out[0].shape[1] == 0:  # TL would return (batch, 0, d_vocab) logits and a NaN loss
            refuse_empty(input)
        return out

    def set_tokenizer(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().set_tokenizer(tokenizer, *args, **kwargs)
        # its special ids past W_E's rows (the char tokenizer's <|endoftext|>) embed as zeros (rewire.VocabCheckedEmbed)
        embed = cast(Any, self.embed)
        embed.n_special = max(0, len(cast(Any, self.tokenizer)) - embed.W_E.shape[0])
