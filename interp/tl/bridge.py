"""A ResidualGPT as a TransformerLens 4 TransformerBridge that runs ResidualGPT's own forward.

TransformerLens 4 removed HookedTransformer; its TransformerBridge wraps an
existing nn.Module through an architecture adapter instead of re-implementing
it. So, unlike the 3.x export (interp.tl.hooked), nothing is converted: the bridge
wraps a copy of the ResidualGPT itself, and every forward is ResidualGPT's -
removed residual paths, routing controls (self_bias, uniform) and the
position-blind mixer included - bit for bit.

Hook names, two families on one model:

    TL 4 canonical   blocks.{l}.hook_in / hook_out, blocks.{l}.attn.hook_in / hook_out,
                     blocks.{l}.ln1.hook_in / hook_out, blocks.{l}.mlp.hook_in / hook_out,
                     embed.hook_out, unembed.hook_out, ... (TL 4's generalized components)
    TL 3 names       hook_embed, hook_pos_embed, blocks.{l}.hook_resid_pre|mid|post,
                     blocks.{l}.hook_attn_out|mlp_out, blocks.{l}.ln1.hook_scale|normalized,
                     blocks.{l}.attn.hook_q|k|v|attn_scores|pattern|z|result, blocks.{l}.mlp.hook_pre|post,
                     ln_final.hook_scale|normalized

The TL 3 names are ResidualGPT's own HookPoints (the ones its forward reads
back), registered on the bridge's components, so a value cached or patched
there is the one the model computes with: patching hook_resid_mid changes both
the MLP input and the residual it feeds, as on a HookedTransformer (TL 4's own
BlockBridge would alias it to ln2's input only). hook_result is the only one
computed for the bridge: per-head outputs when set_use_attn_result(True), as on
3.x. Which hooks the attention slot has is what the mixer declares
(interp.config.registry.mixer_spec: hook_sites, has_heads); a mixer without heads or
pattern (position_blind) is bridged without them, and asking for one is a
ToolkitError that names the hooks it has.

With a residual path removed, ActivationCache's additive methods refuse (they
assume the stream is the sum of every sublayer output); nothing is folded, so
apply_ln_to_stack, every apply_ln=True, tokens_to_residual_directions and
logit_attrs warn at each call (a cache built by hand included: interp.tl.stream_reads);
interp.reading.decompose reads bridge caches and is exact.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, cast

import torch
from torch import Tensor, nn
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge.sources import build_bridge_from_module

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import CheckpointError, ConfigError, ToolkitError, refuse_if_not_additive, state_dict_detail
from interp.files.checkpoint import SCHEMA, Checkpoint, refuse_non_finite_forward
from interp.files.tokenizers import tokenizer_for
from interp.model.activation_cache import LOGIT_ATTRS_MESSAGE
from interp.model.gpt import ResidualGPT
from interp.tl import stream_reads
from interp.tl.bridge_adapter import (  # registers the adapter
    ARCHITECTURE,
    ROUTING_APPLIED_BY,
    BridgeHost,
    EmbedBridge,
    HeadResults,
    MixerBridge,
    routing_quiet,
)
from interp.tl.bridge_cache import lacks_hook, lacks_hook_error
from interp.tl.bridge_hooks import BridgeHooks
from interp.tl.guards import ExportGuards, resolve_source
from interp.tl.major import tl_config_fields
from interp.tl.saved import BRIDGE_SCHEMA, load_weights, read_saved, tokenizer_fields, write_saved
from interp.tl.tokens import leading_special, warn_no_tokenizer

stream_reads.install()  # TL's cache methods ask the bridge (_check_stream_read) at every call

_DECOMPOSE = "interp.reading.decompose (decompose, direct_logit_attribution, logit_lens), which follows this model's "


# --------------------------------------------------------------------------- the bridge and its cache


def _no_processing(call: str) -> ToolkitError:
    return ToolkitError(
        f"{call}: TransformerLens 4's weight processing (fold_ln, center_writing_weights, center_unembed, "
        "fold_value_biases) is not wired to this bridge, which runs ResidualGPT's own weights and forward (exact, "
        "ablated residuals included) and already has TL 3's hook names; use interp.reading.decompose for exact "
        "decompositions (no folding needed), enable_compatibility_mode(no_processing=True) (a no-op here), or on "
        "TransformerLens 3.x interp.to_hooked_transformer(..., fold_ln=True, center_writing_weights=True)"
    )


def _bridged_mixer(block: nn.Module) -> Any:
    """The ResidualGPT mixer inside a bridged block (a registered mixer class: typed Any, as mixer_spec is)."""
    return cast(MixerBridge, block.attn).original_component


def _show(wiring: Tensor | None) -> str:
    if wiring is None or wiring.dim() == 0:
        return repr(None if wiring is None else wiring.item())
    return repr(bytes(wiring.tolist()).decode(errors="replace"))  # wiring.mixer: the name


class ResidualBridge(ExportGuards, BridgeHooks):
    """The TransformerBridge of a ResidualGPT (what to_transformer_bridge returns).

    residual_gpt is the bridged model (its modules now wrapped by TL 4's
    components); hook_embed and hook_pos_embed are its own hook points, as
    every TL 3 name is (see the module docstring). The guards it shares with the 3.x export are
    interp.tl.guards.ExportGuards'.
    """

    hook_aliases = {"hook_unembed": "unembed.hook_out"}

    @property
    def has_heads(self) -> bool:
        return mixer_spec(self.residual_gpt.cfg.mixer).has_heads

    @property
    def has_pattern(self) -> bool:
        return mixer_spec(self.residual_gpt.cfg.mixer).has_pattern

    def _resolve_hook_point(self, name: str, aliases: dict, hook_dict: dict) -> tuple[str, HookPoint]:
        if lacks_hook(self.residual_gpt.cfg, name):
            raise lacks_hook_error(self.residual_gpt.cfg, name)
        return super()._resolve_hook_point(name, aliases, hook_dict)  # type: ignore[misc]  # TL 4's; 3.9 lacks it

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Fire blocks.{l}.attn.hook_result ([batch, pos, head, d_model], each head's share of hook_attn_out)."""
        if not all(isinstance(_bridged_mixer(b).out_proj, HeadResults) for b in self.residual_gpt.blocks):
            raise lacks_hook_error(self.residual_gpt.cfg, "blocks.{l}.attn.hook_result")
        self.cfg._set_bridge_managed_hook_flag("use_attn_result", bool(use_attn_result))  # cfg.x = routes here
        for block in self.residual_gpt.blocks:
            _bridged_mixer(block).out_proj.enabled = bool(use_attn_result)

    def _wiring(self) -> dict[str, Tensor]:
        cfg = self.residual_gpt.cfg
        wiring = {
            "wiring.attn_residual": torch.tensor(cfg.attn_residual),
            "wiring.ffn_residual": torch.tensor(cfg.ffn_residual),
            "wiring.mixer": torch.tensor(list(cfg.mixer.encode()), dtype=torch.uint8),  # its name, as bytes
            "wiring.self_bias": torch.tensor(cfg.self_bias),
            "wiring.runtime_gain": torch.tensor(cfg.runtime_gain),
        }
        if cfg.mixer_params:  # a mixer's parameters (e.g. a window), as JSON bytes; absent where it has none
            text = json.dumps(dict(cfg.mixer_params), sort_keys=True)
            wiring["wiring.mixer_params"] = torch.tensor(list(text.encode()), dtype=torch.uint8)
        return wiring

    # Its own dict (never fills a `destination`), hence no Module.state_dict overloads.
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:  # type: ignore[override]
        """ResidualGPT's weights under its own names, and wiring.* entries that say how they are wired.

        TL 4's own state_dict would drop weights of this tree; the wiring.* keys
        make a plain TL 4 model refuse this dict ("Unexpected key(s)").
        """
        weights = {k: v.detach() for k, v in self._residual_weights.items()}
        return {**weights, **self._wiring()}

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Load a ResidualBridge's state_dict: the wiring must be this model's, every weight must fit."""
        state = dict(state_dict)
        for key, value in self._wiring().items():
            given = state.pop(key, None)
            given = None if given is None else torch.as_tensor(given).to(value.dtype)
            if given is None or given.shape != value.shape or not torch.equal(given, value):
                raise CheckpointError(
                    f"state dict wiring {key}={_show(given)} is not this model's ({_show(value)}): it belongs "
                    "to another residual config or mixer (or is not a ResidualBridge's state dict)"
                )
        missing = sorted(set(self._residual_weights) - set(state))
        unexpected = sorted(set(state) - set(self._residual_weights))
        if missing or unexpected:
            raise CheckpointError(f"state dict does not fit: missing {missing}, unexpected {unexpected}")
        with torch.no_grad():
            for key, tensor in self._residual_weights.items():
                if state[key].shape != tensor.shape:
                    raise CheckpointError(f"{key}: shape {tuple(state[key].shape)}, expected {tuple(tensor.shape)}")
                tensor.copy_(state[key])
        return None

    def enable_compatibility_mode(  # type: ignore[override]  # TL's processing flags by keyword, to refuse them
        self, disable_warnings: bool = False, no_processing: bool = False, **processing: Any
    ) -> None:
        """A no-op with no_processing=True (this bridge already has TL 3's hook names); else a ToolkitError.

        TL's weight processing (fold_ln, centering, fold_value_biases) is not wired
        to ResidualGPT's forward: it would leave the bridge computing another function.
        """
        if not no_processing:
            raise _no_processing("enable_compatibility_mode()")

    def process_weights(self, *args: Any, **kwargs: Any) -> None:
        raise _no_processing("process_weights()")

    # ------------------------------------------------------------------ this major's part of interp.tl.guards

    unfolded_fix = (
        "the bridge runs ResidualGPT's own weights and cannot fold them: use interp.reading.decompose (decompose, "
        "direct_logit_attribution, logit_lens), exact without folding (on TransformerLens 3, "
        "interp.to_hooked_transformer folds by default)"
    )
    routing_applied_by = ROUTING_APPLIED_BY

    @property
    def model_config(self) -> ModelConfig:
        """The ResidualGPT ModelConfig this bridge computes (its bridged model's)."""
        return self.residual_gpt.cfg

    def _logit_attrs_word(self) -> str | None:
        return LOGIT_ATTRS_MESSAGE  # the bridge never folds ln_final (as an unfolded 3.x export)

    def _padding_mark(self, tokens: Tensor, padding_side: str | None) -> Any:
        """True (the embedding says nothing of to_tokens' BOS or padding: bridge_adapter.EmbedBridge); left
        padding that sets rows apart is refused, as ResidualGPT has no position offsets."""
        lead = leading_special(tokens, self.n_trained)
        if lead is not None and lead.shape[0] > 1 and len(set(lead.sum(-1).tolist())) > 1:  # rows padded apart
            raise ConfigError(
                "to_tokens: this batch is padded on the left (padding_side='left'), but the bridge runs ResidualGPT, "
                "which has no position offsets: every real token would sit at another position; pad on the right "
                "(padding_side='right', the default) or give prompts of equal length"
            )
        return True

    def _check_stream_read(self, method: str, args: dict[str, Any]) -> None:
        """Called by TL's ActivationCache methods on this bridge's caches (interp.tl.stream_reads), each call:
        the additive methods refused where a residual path is removed, then the guards' checks."""
        if method in stream_reads.ADDITIVE_METHODS:  # stack_neuron_results included
            refuse_if_not_additive(method, self.residual_gpt.cfg.residual, _DECOMPOSE + "wiring and reads this cache")
        super()._check_stream_read(method, args)

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> Tensor:
        """TL 4's sum of every earlier b_O and b_out; refused where a residual path is removed (not every one
        of them reaches block `layer`), as the cache's additive methods are."""
        cfg = self.residual_gpt.cfg
        if cfg.residual != "full":
            raise ToolkitError(
                f"accumulated_bias assumes the residual stream is the sum of the embeddings and every sublayer "
                f"output (each b_O and b_out reaches every later block), which is false for "
                f"residual={cfg.residual!r}; use {_DECOMPOSE}wiring, or read the biases that reach block "
                f"{layer} by hand (blocks[l].attn.b_O, blocks[l].mlp.b_out)"
            )
        return super().accumulated_bias(layer, mlp_input, include_mlp_biases)

    # ------------------------------------------------------------------ weights: the routing W_Q @ W_K lacks

    def QK_for_attn_layers(self) -> Any:
        self._warn_hidden_routing("QK_for_attn_layers()")
        with routing_quiet():
            return super().QK_for_attn_layers()


def bridge_config(cfg: ModelConfig) -> TransformerBridgeConfig:
    """The TransformerBridgeConfig of a ModelConfig. d_vocab is the model's (W_E @ W_U square, as SVDInterpreter
    needs); a tokenizer's special ids after it embed as zeros (bridge_adapter.EmbedBridge)."""
    return TransformerBridgeConfig(**tl_config_fields(cfg), architecture=ARCHITECTURE)


def _resolve(source: Any, device: str | torch.device | None) -> tuple[ResidualGPT, dict[str, Any]]:
    """A private ResidualGPT (the bridge rewraps its modules in place) and the checkpoint's extra state."""
    if isinstance(source, ResidualBridge):
        raise ToolkitError("to_transformer_bridge takes a ResidualGPT or a checkpoint, not a bridge (it is one)")
    model, state, own = resolve_source(source, device, "to_transformer_bridge")
    if not own:
        return model, state
    copy = ResidualGPT(model.cfg)  # a copy: bridging replaces the model's submodules
    try:
        copy.load_state_dict(model.state_dict())
    except RuntimeError as e:  # a parameter ResidualGPT does not define (or one missing): no silent drop
        raise ToolkitError(
            f"to_transformer_bridge cannot copy this ResidualGPT's weights: {state_dict_detail(e)}"
        ) from None
    copy = copy.to(device or model.embed.weight.device, model.embed.weight.dtype)
    copy.vocab_state = dict(model.vocab_state)
    return copy.eval(), state  # its vocabulary, where it has one: the tokenizer


def _bridge(model: ResidualGPT, tokenizer: Any) -> ResidualBridge:
    weights = model.state_dict(keep_vars=True)  # references, by ResidualGPT's names, before TL renames the tree
    probe = getattr(tokenizer, "chars", None) is not None
    if probe:  # TL encodes "a" to see whether BOS / EOS get added (ours add neither); "a" may not be a character
        tokenizer.encode = lambda text, *args, **kwargs: [0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TL's notices about adapters it does not know, processing, ...
            bridge = build_bridge_from_module(
                BridgeHost(model), ARCHITECTURE, tl_config=bridge_config(model.cfg), tokenizer=tokenizer
            )
    finally:
        if probe:
            del tokenizer.encode  # the class's own again
    bridge.__class__ = ResidualBridge
    object.__setattr__(bridge, "_residual_weights", weights)  # not a submodule: no second copy in the tree
    bridge.hook_embed = model.hook_embed  # ResidualGPT's [batch, pos, d_model] values, not TL's aliases
    bridge.hook_pos_embed = model.hook_pos_embed
    for layer, block in enumerate(bridge.blocks):
        block.mlp.gain = model.cfg.runtime_gain
        block.mlp.layer = block.attn.layer = layer
    if tokenizer is not None:  # its special ids after the model's embed as zeros; any other id is refused
        cast(EmbedBridge, bridge.embed).n_special = max(0, len(tokenizer) - model.cfg.d_vocab)
        bridge.tokenizer.padding_side = "right"
    return cast(ResidualBridge, bridge.eval())  # its class set to ResidualBridge above


def to_transformer_bridge(
    source: ResidualGPT | Checkpoint | str | os.PathLike,
    *,
    vocab: list[str] | None = None,
    device: str | torch.device | None = None,
) -> ResidualBridge:
    """A ResidualGPT, Checkpoint or checkpoint path as a TransformerLens 4 TransformerBridge.

    The bridge runs a copy of the ResidualGPT (the one given is left as it
    was), so logits and every TL 3 hook name's value are ResidualGPT's exactly.
    No weight processing: enable_compatibility_mode's folding does not apply
    (interp.reading.decompose is exact without it). vocab (a list of characters) or the
    checkpoint's state["vocab"] / state["encoding"] == "gpt2" gives the
    tokenizer, as for to_hooked_transformer.
    """
    model, state = _resolve(source, device)
    tokenizer, why_not = tokenizer_for(model.cfg.d_vocab, vocab, state)
    if tokenizer is None:
        warn_no_tokenizer(why_not)
    return _bridge(model, tokenizer)


# --------------------------------------------------------------------------- saving


def save_bridge(bridge: ResidualBridge, path: str | os.PathLike) -> None:
    """Save a bridge from to_transformer_bridge for load_bridge: its ResidualGPT, wiring and tokenizer.

    The weights are ResidualGPT's, under its own names, with its ModelConfig:
    plain data (weights_only=True), written atomically.
    """
    if not isinstance(bridge, ResidualBridge):
        raise ToolkitError("save_bridge takes a model made by interp.to_transformer_bridge")
    payload = {
        "schema": BRIDGE_SCHEMA,
        "model_config": bridge.residual_gpt.cfg.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in bridge._residual_weights.items()},
        **tokenizer_fields(bridge.tokenizer),
    }
    write_saved(path, payload)


def load_bridge(path: str | os.PathLike, device: str | torch.device | None = None) -> ResidualBridge:
    """The bridge that save_bridge wrote, wiring and tokenizer included (strict: every weight must fit)."""
    payload = read_saved(path, device, "bridge", "save_bridge")
    schema = payload.get("schema") if isinstance(payload, dict) else None
    if schema != BRIDGE_SCHEMA:
        hint = " (a ResidualGPT checkpoint: use to_transformer_bridge)" if schema == SCHEMA else ""
        raise CheckpointError(f"{path} has schema {schema!r}; load_bridge reads {BRIDGE_SCHEMA!r}{hint}")
    from interp.files.checks import checked
    from interp.tl.saved_file import check_bridge

    with checked(path, CheckpointError, "it cannot be loaded"):
        cfg = check_bridge(payload, str(device or "cpu"))
    model = ResidualGPT(cfg)
    load_weights(model, payload["state_dict"], path)
    model = (model.to(device) if device is not None else model).eval()
    refuse_non_finite_forward(path, model, cfg.d_vocab, cfg.n_ctx)
    state = {k: payload[k] for k in ("vocab", "encoding") if payload.get(k) is not None}
    tokenizer, _ = tokenizer_for(cfg.d_vocab, None, state)
    return _bridge(model, tokenizer)
