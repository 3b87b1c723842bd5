"""The rewiring that makes a plain HookedTransformer compute a ResidualGPT's function.

TL's block cannot express a removed residual path or a mixer's routing, so a
few of its HookPoints are swapped for subclasses that do the work in their
forward, i.e. before any hook (user, cache, permanent) sees the value:

    attention routing  hook_attn_scores applies the mixer's declared routing
                       (interp.model.mixers: self_bias, the uniform mixer) to the
                       causally masked scores, exactly as ResidualGPT's
                       hook_attn_scores holds them;
    removed residual   hook_attn_out / hook_mlp_out record their output after all
                       hooks ran, and hook_resid_mid / hook_resid_post return that
                       record in place of TL's resid + out.

Being modules rather than hook functions, these survive model.reset_hooks()
(even including_permanent=True), always run first, and see a user's patch of
hook_attn_out, so interventions compose as they do on ResidualGPT. Every
swapped hook point holds a buffer naming what it does (e.g.
blocks.0.hook_resid_mid.residual_removed), so a strict load_state_dict into a
plain HookedTransformer refuses the state dict ("Unexpected key(s)"); strict=False
and load_and_process_state_dict would drop them, which is why save_hooked's file
keeps its tensors in shapes no plain HookedTransformer takes (interp.tl.hooked.persist).

A routed block's attention also becomes a RoutedAttention, so reading its W_Q, W_K or
QK from outside the forward pass warns (HiddenRoutingWarning) as the model-level ones do.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.components import Attention, Embed, PosEmbed
from transformer_lens.hook_points import HookPoint

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.tl.major import refuse_past_n_ctx
from interp.tl.routing_words import routing_quiet, warn_hidden_routing
from interp.tl.tokens import check_embedded_ids


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
    """hook_attn_scores with the mixer's routing (its tl_scores) applied to TL's causally masked scores.

    The routing is also in the state dict (the mixer's tl_routing_record buffers,
    e.g. routing_self_bias / routing_uniform), which a plain HookedTransformer refuses.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.mixer = mixer_spec(cfg.mixer)
        self.model_cfg = cfg
        for name, value in self.mixer.tl_routing_record(cfg).items():
            self.register_buffer(name, value)

    def extra_repr(self) -> str:
        return f"mixer={self.model_cfg.mixer!r}, self_bias={self.model_cfg.self_bias}"

    def forward(self, scores: Float[Tensor, "batch head q k"]) -> Float[Tensor, "batch head q k"]:
        return self.mixer.tl_scores(self.model_cfg, scores)


ROUTING_APPLIED_BY = "this export's hook_attn_scores"  # in HiddenRoutingWarning's text, the export's and each block's


class RoutedAttention(Attention):
    """TL's Attention in a routed block: W_Q, W_K and QK read by a user warn (HiddenRoutingWarning).

    Its own forward pass reads W_Q / W_K too, so it runs under routing_quiet. A zero W_Q
    (the uniform mixer) shows the routing itself: W_Q @ W_K = 0, so no word then.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with routing_quiet():
            return super().forward(*args, **kwargs)

    def _warn_hidden(self, what: str) -> None:
        w_q = self._parameters.get("W_Q")
        routing = self._modules.get("hook_attn_scores")
        if isinstance(routing, RoutedScoresHookPoint) and w_q is not None:
            layer = getattr(self, "layer_id", None)
            where = f"blocks[{layer}].attn.{what}" if layer is not None else f"attn.{what}"
            warn_hidden_routing(where, routing.model_cfg, ROUTING_APPLIED_BY, lambda: w_q)

    def __getattr__(self, name: str) -> Any:
        if name in ("W_Q", "W_K"):
            self._warn_hidden(name)
        return super().__getattr__(name)

    @property
    def QK(self) -> Any:
        self._warn_hidden("QK")
        with routing_quiet():
            return super().QK  # Attention's (warned once above, not again for W_Q / W_K)


def _rewire(model: HookedTransformer, cfg: ModelConfig) -> None:
    """Swap in the hook points above where cfg departs from a plain Pre-LN GPT (each remembered: keep_rewiring)."""
    routed = mixer_spec(cfg.mixer).tl_routes_scores(cfg)
    swapped: list[tuple[torch.nn.Module, str, HookPoint]] = []
    paths = (
        ("hook_attn_out", "hook_resid_mid", cfg.attn_residual),
        ("hook_mlp_out", "hook_resid_post", cfg.ffn_residual),
    )
    for block in model.blocks:
        if routed:
            swapped.append((block.attn, "hook_attn_scores", RoutedScoresHookPoint(cfg)))
            if type(block.attn) is Attention:  # what every export builds (no GQA)
                block.attn.__class__ = RoutedAttention
        for out_name, resid_name, kept in paths:
            if not kept:  # a removed residual path: hook_resid_* returns what hook_*_out recorded
                slot = _Slot()
                swapped += [(block, out_name, RecordedHookPoint(slot)), (block, resid_name, NoResidualHookPoint(slot))]
    for holder, name, point in swapped:
        setattr(holder, name, point)
    model.__dict__["rewired_points"] = swapped  # a plain list, not submodules: read by keep_rewiring
    model.setup()  # re-register hook names for the new modules


def keep_rewiring(model: HookedTransformer) -> None:
    """Where a module took the place of a swapped hook point, the rewiring goes on around it.

    SAELens's add_sae sets its SAE wrapper in place of the hook point at the SAE's site, and its reset sets a
    plain HookPoint there; either would drop the rewiring (a removed residual's hook_resid_* would add the
    residual back, hook_*_out would record nothing). A plain HookPoint is swapped back for the rewiring one; any
    other module gets the rewiring as torch hooks of its own: what the hook point's forward does, before it
    (a removed residual, a routing), or the record of its output, after it (hook_*_out). The export's setup()
    calls this, as SAELens calls setup() after each change."""
    for holder, name, point in model.__dict__.get("rewired_points", []):
        current = holder._modules.get(name)
        if current is point or (current is not None and current.__dict__.get("rewired_by") is point):
            continue
        if current is None or type(current) is HookPoint:
            setattr(holder, name, point)
            continue
        if isinstance(point, RecordedHookPoint):
            current.register_forward_hook(lambda module, args, out, slot=point.slot: setattr(slot, "value", out))
        else:
            current.register_forward_pre_hook(lambda module, args, point=point: (point.forward(args[0]), *args[1:]))
        current.__dict__["rewired_by"] = point  # not a submodule: no hook names under the module


class ContextCheckedPosEmbed(PosEmbed):
    """TL's PosEmbed that refuses a position past n_ctx with a ConfigError (TL would index out of range)."""

    def forward(self, tokens, past_kv_pos_offset: int = 0, attention_mask=None):
        if attention_mask is None:
            n = tokens.size(-1) + past_kv_pos_offset
        else:  # padded: positions count the attended tokens only
            n = int(attention_mask.sum(-1).max())
        refuse_past_n_ctx(n, self.cfg.n_ctx)
        return super().forward(tokens, past_kv_pos_offset, attention_mask)


class VocabCheckedEmbed(Embed):
    """TL's Embed at the export's token boundary (forward, run_with_cache, generate, patching all embed here).

    W_E holds the model's trained rows only (W_E @ W_U square, as TL's weight analyses need); the tokenizer's
    n_special special ids after them (the char tokenizer's <|endoftext|>: BOS and padding) embed as zeros, never
    trained. An id outside both is a TokenIdError: TL would take W_E[-1] for -1 without a word, or fail with an
    IndexError past it. A special id before the text warns UntrainedTokenWarning; ids that to_tokens made are
    its BOS (to_tokens warns for prepend_bos) or padding (trailing, or left padding TL masks): no word.
    (A save_hooked file written before W_E was square keeps its zero special rows in W_E; read the same.)"""

    n_special = 0  # set from the tokenizer (ExportedHookedTransformer.set_tokenizer)

    def forward(self, tokens: Any) -> Any:
        rows, trained = self.W_E.shape[0], self.cfg.d_vocab_out
        check_embedded_ids(tokens, trained, max(rows, trained + self.n_special))
        beyond = tokens >= rows
        if not bool(beyond.any()):
            return super().forward(tokens)
        embedded = super().forward(tokens.masked_fill(beyond, 0))  # TL's hooks and dtype; rows past W_E are zero
        return embedded.masked_fill(beyond[..., None].to(embedded.device), 0.0)


def rewire_hooked(model: HookedTransformer, cfg: ModelConfig) -> None:
    """Everything that makes a plain HookedTransformer this ResidualGPT: rewiring, n_ctx and id checks, the record."""
    model.pos_embed.__class__ = ContextCheckedPosEmbed  # TL's modules, their W_pos / W_E and cfg as they are
    model.embed.__class__ = VocabCheckedEmbed
    _rewire(model, cfg)
    # Not a TL field (HookedTransformerConfig.from_dict(cfg.to_dict()) fails loudly): set here, read by the export.
    model.cfg.residual_gpt_config = cfg.to_dict()  # type: ignore[attr-defined]
