"""The TransformerLens 4 architecture adapter for ResidualGPT: its generalized components (embedding,
LayerNorm, MLP, the mixer slot with the hooks its mixer declares, the block carrying ResidualGPT's own
TL 3 hook points) and the module that hosts the ResidualGPT. interp.tl.bridge builds the bridge from it.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import Tensor, nn
from transformer_lens.FactoredMatrix import FactoredMatrix
from transformer_lens.factories.architecture_adapter_factory import ArchitectureAdapterFactory
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge import ArchitectureAdapter
from transformer_lens.model_bridge.generalized_components import (
    BlockBridge,
    EmbeddingBridge,
    PosEmbedBridge,
    UnembeddingBridge,
)
from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ConfigError, ToolkitError
from interp.model.gpt import ResidualGPT
from interp.model.sublayers import tl_mlp_weights
from interp.tl.bridge_weights import exposed_weight
from interp.tl.major import refuse_past_n_ctx
from interp.tl.routing_words import routing_quiet, warn_hidden_routing
from interp.tl.tokens import check_embedded_ids

ARCHITECTURE = "ResidualGPT"

# ResidualGPT's hook points, by the component that carries them on the bridge.
_BLOCK_HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
_LN_HOOKS = ("hook_scale", "hook_normalized")
_MLP_HOOKS = ("hook_pre", "hook_post")
# Every TL 3 name a mixer may have under blocks.{l}.attn; a model has those its mixer declares (attn_sites).
_ATTENTION_NAMES = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z", "hook_result")
ATTN_NAMES = (*_ATTENTION_NAMES, "hook_pre", "hook_post")


def _adopt(component: GeneralizedComponent, module: nn.Module, names: tuple[str, ...]) -> None:
    """Register module's own HookPoints (those it has) on the bridge component under the same names."""
    for name in names:
        hook = getattr(module, name, None)
        if isinstance(hook, HookPoint):
            setattr(component, name, hook)


class EmbedBridge(EmbeddingBridge):
    """The token embedding; a tokenizer special (id >= d_vocab: <|endoftext|> as PAD / BOS) embeds as zeros.

    As on the 3.x export, whose embedding has a zero row for it. ResidualGPT itself has no such row. An id
    outside both (negative, or past the tokenizer's specials) is a TokenIdError, as on ResidualGPT and the 3.x
    export (rewire.VocabCheckedEmbed). A special id before the text warns UntrainedTokenWarning, as on the 3.x
    export; ids that to_tokens made are its BOS (to_tokens warns for prepend_bos) or padding (trailing): no word.
    """

    n_special = 0  # the tokenizer's special ids after the model's: set by interp.tl.bridge._bridge

    def forward(self, input_ids: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        weight = cast(nn.Embedding, self.original_component).weight  # ResidualGPT's embed
        check_embedded_ids(input_ids, weight.shape[0], weight.shape[0] + self.n_special)
        special = input_ids >= weight.shape[0]
        if not special.any():
            return super().forward(input_ids, *args, **kwargs)
        input_ids = self.hook_in(input_ids)
        out = F.embedding(input_ids.masked_fill(special, 0), weight).masked_fill(special[..., None], 0.0)
        return self.hook_out(out)


class _Component(GeneralizedComponent):
    """A bridged ResidualGPT module: TL 4's hook_in / hook_out around it, and its own hook points by name."""

    adopted: tuple[str, ...] = ()

    def set_original_component(self, original_component: nn.Module) -> None:
        super().set_original_component(original_component)
        _adopt(self, original_component, self.adopted)


class _LayerNormBridge(_Component):
    adopted = _LN_HOOKS


def _weights_of(module: object) -> Any:
    """take(name, like=None) for a Mixer.tl_weights: module's tensor by dotted name (zeros like `like` if None)."""

    def take(name: str, like: Tensor | None = None) -> Tensor:
        value = cast("Tensor | None", functools.reduce(getattr, name.split("."), module))
        if value is None:
            if like is None:  # what torch.zeros_like(None) raised, with the name
                raise TypeError(f"{name}: not on the module, and no `like` to make zeros from")
            return torch.zeros_like(like)
        return value

    return take


class _MLPBridge(_Component):
    """The MLP, with TL's weight properties (W_in [d_model, d_mlp], ...; runtime_gain folded into W_out / b_out,
    as on the 3.x export), read from ResidualGPT's own weights at each access: views of them where no gain is
    folded in (edits reach the model), else tensors whose in-place edits are written back (_DerivedWeight).
    hook_out holds what the MLP adds to the stream (runtime_gain applied), as hook_mlp_out."""

    adopted = _MLP_HOOKS
    gain = 1.0  # the model's runtime_gain (an MLP has no cfg): set by _bridge
    layer: int | None = None  # set by _bridge, for messages

    def _tl(self, name: str) -> Tensor:
        module = cast(nn.Module, self.original_component)
        value = tl_mlp_weights(_weights_of(module))[name]
        gain = self.gain if name in ("W_out", "b_out") else 1.0
        return exposed_weight(module, f"blocks[{self.layer}].mlp.{name}", value, gain)

    W_in = property(lambda self: self._tl("W_in"))
    b_in = property(lambda self: self._tl("b_in"))
    W_out = property(lambda self: self._tl("W_out"))
    b_out = property(lambda self: self._tl("b_out"))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return _gained_forward(self, self.gain, args, kwargs)


def _gained_forward(component: GeneralizedComponent, gain: float, args: tuple, kwargs: dict) -> Any:
    """The component's forward with hook_out seeing output * gain - what the block adds to the stream - as
    hook_attn_out / hook_mlp_out do (TL's own _hook_scaled_output: exact where the hook edits nothing)."""
    if gain == 1.0:
        return GeneralizedComponent.forward(component, *args, **kwargs)
    if args and isinstance(args[0], Tensor):
        args = (component.hook_in(args[0]), *args[1:])
    out = cast(nn.Module, component.original_component)(*args, **kwargs)
    return component._hook_scaled_output(out, component.hook_out, gain)


# --------------------------------------------------------------------------- routing W_Q @ W_K does not show


ROUTING_APPLIED_BY = "this model's attention"  # in HiddenRoutingWarning's text, the bridge's and each block's


class HeadResults(nn.Module):
    """The mixer's out_proj, which can fire hook_result: per-head outputs [batch, pos, head, d_model].

    Off (the default), it is the plain Linear, bit for bit. On, it computes
    each head's z_h @ W_O_h, lets hook_result see (and edit) them scaled by
    runtime_gain - what each head adds to hook_attn_out, as on the 3.x export
    where the gain is folded into W_O - and sums them.
    """

    def __init__(self, linear: nn.Linear, cfg: ModelConfig):
        super().__init__()
        self.linear = linear
        self.n_heads, self.gain = cfg.n_heads, cfg.runtime_gain
        self.hook_result = HookPoint()
        self.enabled = False

    @property
    def weight(self) -> Tensor:
        return self.linear.weight

    @property
    def bias(self) -> Tensor | None:
        return self.linear.bias

    def forward(self, z: Tensor) -> Tensor:
        if not self.enabled:
            return self.linear(z)
        z = rearrange(z, "b p (h dh) -> b p h dh", h=self.n_heads)
        w_o = rearrange(self.linear.weight, "d (h dh) -> h dh d", h=self.n_heads)
        result = self.hook_result(einsum(z, w_o, "b p h dh, h dh d -> b p h d") * self.gain)
        out = result.sum(-2) / self.gain if self.gain != 1.0 else result.sum(-2)
        return out + self.linear.bias if self.linear.bias is not None else out


def attn_sites(cfg: ModelConfig) -> tuple[str, ...]:
    """The TL 3 hook names under blocks.{l}.attn that this model's mixer has: its declared hook sites, and
    hook_result where it has heads written through out_proj (see HeadResults)."""
    spec = mixer_spec(cfg.mixer)
    return (*spec.hook_sites, *(("hook_result",) if spec.has_heads else ()))


class MixerBridge(GeneralizedComponent):
    """The attention slot: the hook points the mixer declares, and hook_result where it has heads.

    TL's weight properties (W_Q [n_heads, d_model, d_head], ..., W_O, b_O, QK, OV) are what the
    mixer declares for TL (Mixer.tl_weights; runtime_gain folded into W_O / b_O, as on
    the 3.x export), read from ResidualGPT's weights at each access: an in-place edit reaches
    the model (a view, or written back: _DerivedWeight) or is refused where the model has no
    such weight; a mixer that declares none (position_blind) makes them a ToolkitError. W_Q, W_K
    and QK warn (HiddenRoutingWarning) where the scores apply a routing they lack (self_bias).
    hook_out holds what the mixer adds to the stream (runtime_gain applied), as hook_attn_out.
    """

    layer: int | None = None  # set by _bridge, for messages

    def _tl(self, name: str) -> Tensor:
        # A registered mixer class (interp.model.mixers.Mixer in an nn.Module), typed Any as
        # interp.config.registry.mixer_spec is
        mixer: Any = self.original_component
        spec = type(mixer)  # a registered mixer class is its own spec (interp.config.registry)
        if not spec.exports_to_tl():
            raise ToolkitError(
                f"mixer={spec.name!r} has no TransformerLens attention weights (W_Q, W_K, W_V, W_O, their biases, "
                f"QK, OV): {spec.no_tl_equivalent}; read ResidualGPT's own weights instead, "
                "bridge.residual_gpt.blocks[l].attn (its parameters by name)"
            )
        if name in ("W_Q", "W_K"):
            self._warn_routing(name)
        value = mixer.tl_weights(_weights_of(mixer))[name]
        gain = mixer.cfg.runtime_gain if name in ("W_O", "b_O") else 1.0
        return exposed_weight(mixer, f"blocks[{self.layer}].attn.{name}", value, gain)

    def _warn_routing(self, what: str) -> None:
        mixer: Any = self.original_component
        where = f"blocks[{self.layer}].attn.{what}"
        warn_hidden_routing(where, mixer.cfg, ROUTING_APPLIED_BY, lambda: mixer.tl_weights(_weights_of(mixer))["W_Q"])

    W_Q = property(lambda self: self._tl("W_Q"))
    W_K = property(lambda self: self._tl("W_K"))
    W_V = property(lambda self: self._tl("W_V"))
    W_O = property(lambda self: self._tl("W_O"))
    b_Q = property(lambda self: self._tl("b_Q"))
    b_K = property(lambda self: self._tl("b_K"))
    b_V = property(lambda self: self._tl("b_V"))
    b_O = property(lambda self: self._tl("b_O"))

    @property
    def QK(self) -> FactoredMatrix:
        """W_Q @ W_K^T per head (as TL 3's Attention.QK); warns where the scores apply a routing it lacks."""
        self._tl("W_V")  # a mixer without TL weights: its ToolkitError
        self._warn_routing("QK")
        with routing_quiet():
            return FactoredMatrix(self._tl("W_Q"), self._tl("W_K").transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """W_V @ W_O per head (as TL 3's Attention.OV), runtime_gain included."""
        return FactoredMatrix(self._tl("W_V"), self._tl("W_O"))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        cfg = getattr(self.original_component, "cfg", None)
        return _gained_forward(self, getattr(cfg, "runtime_gain", 1.0), args, kwargs)

    def set_original_component(self, original_component: nn.Module) -> None:
        super().set_original_component(original_component)
        spec: Any = type(original_component)  # a registered mixer class: its declarations (interp.config.registry)
        cfg = getattr(original_component, "cfg", None)
        _adopt(self, original_component, spec.hook_sites)
        out_proj = getattr(original_component, "out_proj", None)
        if spec.has_heads and cfg is not None and isinstance(out_proj, nn.Linear):
            results = HeadResults(out_proj, cfg)
            original_component.out_proj = results
            self.hook_result = results.hook_result


class _UnembedBridge(UnembeddingBridge):
    """The unembedding; b_U, which ResidualGPT lacks (its unembed has no bias), is zeros that refuse an in-place
    edit (it would change no logit), as every computed weight does (_DerivedWeight)."""

    @property
    def b_U(self) -> Tensor:
        module = cast(nn.Module, self.original_component)
        return exposed_weight(module, "b_U", cast(Tensor, UnembeddingBridge.b_U.fget(self)))  # type: ignore[attr-defined]


class _ResidualBlockBridge(_Component, BlockBridge):
    """A Block: TL 4's hook_in / hook_out, and ResidualGPT's residual hook points by their TL names.

    No aliases: hook_resid_mid etc. are the block's own hook points (see the module docstring).
    """

    hook_aliases: dict[str, str | list[str]] = {}
    adopted = _BLOCK_HOOKS

    @staticmethod
    def _is_standalone_hidden_state_call(args: tuple, kwargs: dict) -> bool:
        return False  # ResidualGPT calls block(resid) and wants the tensor back, never a tuple


class ResidualGPTAdapter(ArchitectureAdapter):
    """How a BridgeHost's module tree maps onto TL 4's components (the ResidualGPT lives at .gpt)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.supports_fold_ln = False  # weights are ResidualGPT's own; no processing (see to_transformer_bridge)
        self.supports_center_writing_weights = False
        self.weight_processing_conversions = {}
        self.component_mapping = {
            "embed": EmbedBridge(name="gpt.embed"),
            "pos_embed": PosEmbedBridge(name="gpt.pos_embed"),
            "blocks": _ResidualBlockBridge(
                name="gpt.blocks",
                config=self.cfg,
                submodules={
                    "ln1": _LayerNormBridge(name="ln1"),
                    "attn": MixerBridge(name="attn"),
                    "ln2": _LayerNormBridge(name="ln2"),
                    "mlp": _MLPBridge(name="mlp"),
                },
            ),
            "ln_final": _LayerNormBridge(name="gpt.ln_final"),
            "unembed": _UnembedBridge(name="gpt.unembed"),
        }


ArchitectureAdapterFactory.register_adapter(ARCHITECTURE, ResidualGPTAdapter)


class BridgeHost(nn.Module):
    """Holds the ResidualGPT at .gpt: its own names (embed, blocks, ...) would collide with the bridge's slots."""

    def __init__(self, gpt: ResidualGPT):
        super().__init__()
        self.gpt = gpt

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        if input_ids is None:
            return self._from_layer(inputs_embeds)
        refuse_past_n_ctx(input_ids.shape[-1], self.gpt.cfg.n_ctx)
        if attention_mask is not None and bool((attention_mask.diff(dim=-1) > 0).any()):
            raise ConfigError(
                "a padded batch must be padded on the right (ResidualGPT has no position offsets): "
                "pass padding_side='right', or prompts of equal length"
            )
        return self.gpt(input_ids)  # ids are checked once, by EmbedBridge.forward

    def _from_layer(self, resid: Tensor | None) -> Tensor:
        """TL 4's start_at_layer=k: `resid` enters block k (TL swaps it in there) and ResidualGPT's blocks k..,
        ln_final and unembed run on it, as HookedTransformer's forward(start_at_layer=k)."""
        start = getattr(self.gpt.blocks[0], "_start_at_layer_idx", None) if len(self.gpt.blocks) else None
        if resid is None or start is None:
            raise ConfigError(
                "the bridge takes token ids [batch, pos], or a residual stream [batch, pos, d_model] with "
                "start_at_layer=k (the stream entering block k); it takes no input embeddings"
            )
        n, n_ctx = resid.shape[-2], self.gpt.cfg.n_ctx
        if resid.shape[-1] != self.gpt.cfg.d_model or n > n_ctx:
            raise ConfigError(
                f"start_at_layer takes the residual stream [batch, pos <= n_ctx={n_ctx}, d_model="
                f"{self.gpt.cfg.d_model}], got {tuple(resid.shape)}"
            )
        for block in self.gpt.blocks[start:]:
            resid = block(resid)
        return self.gpt.unembed(self.gpt.ln_final(resid))
