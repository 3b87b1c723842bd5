"""Whether a cache was taken from the model it is read with: interp.reading.decompose's boundary.

A decomposition reads the cache's terms and the model's wiring and weights (W_O per head, ln_final,
W_U). A cache from another model - other sizes, another wiring, or the same shapes with other
weights - gives terms that do not sum, or sums that attribute through the wrong weights. Each is
named here (CacheMismatchError) before the decomposition blames the most common cause (a hook
that edited the stream):

    check_cache_origin   up front: model.cfg unedited, the cache's own model, its layers and
                         d_model, and its hook_pos_embed against this model's position embedding
    fitting_wirings      after terms failed to sum: the residual wirings under which they do sum
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.errors import CacheMismatchError
from interp.model.api import check_config_unedited
from interp.reading.stream_layout import Layout, site_terms, wiring

WIRING_NAMES = {(True, True): "full", (True, False): "attn_only", (False, True): "ffn_only", (False, False): "none"}


def _record(model: Any) -> dict[str, Any] | None:
    """What a model computes, as far as its config says (a ResidualGPT's, its export's record, TL's sizes)."""
    cfg = model.cfg
    if isinstance(cfg, ModelConfig):
        return cfg.to_dict()
    record = getattr(cfg, "residual_gpt_config", None)
    if record is not None:
        return dict(record)
    return {k: getattr(cfg, k, None) for k in ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx")}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def _pos_weights(model: Any) -> Tensor | None:
    if getattr(model.cfg, "positional_embedding_type", "standard") != "standard":
        return None
    pos = getattr(model, "pos_embed", None)
    weight = getattr(pos, "weight", None) if isinstance(model.cfg, ModelConfig) else getattr(pos, "W_pos", None)
    return weight if isinstance(weight, Tensor) else None


def check_cache_origin(cache: Any, model: Any) -> None:
    """Refuse a cache that was not taken from model (CacheMismatchError naming what differs)."""
    check_config_unedited(model)
    own = getattr(cache, "model", None)
    own = getattr(own, "residual_gpt", own)  # a TL 4 bridge's cache: its ResidualGPT
    if own is not None and own is not model:
        theirs, ours = _record(own), _record(model)
        if theirs is not None and ours is not None and theirs != ours:
            raise CacheMismatchError(
                f"cache: it was taken from another model than model= ({_differences(theirs, ours)}: the cache's "
                "model vs model=); decompose it with the model that made it (or leave model= out)"
            )
    keys = list(cache.keys())
    n_layers = wiring(model)[0]
    layers = {int(k.split(".")[1]) for k in keys if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    if layers and max(layers) >= n_layers:
        raise CacheMismatchError(
            f"cache: it holds layers 0..{max(layers)}, but the model has {n_layers}: it was taken from another "
            "model; decompose it with the model that made it"
        )
    d_model = getattr(model.cfg, "d_model", None)
    for name in ("blocks.0.hook_resid_pre", "hook_embed"):
        if name in keys and d_model is not None and cache[name].shape[-1] != d_model:
            raise CacheMismatchError(
                f"cache: its {name} has width {cache[name].shape[-1]}, the model's d_model is {d_model}: it was "
                "taken from another model; decompose it with the model that made it"
            )
    w_pos = _pos_weights(model)
    if w_pos is None or "hook_pos_embed" not in keys:
        return
    pe = cache["hook_pos_embed"]
    if pe.dim() < 2 or pe.shape[-1] != w_pos.shape[-1] or pe.shape[-2] > w_pos.shape[0]:
        return  # sizes are refused above where they matter
    row = pe[(0,) * (pe.dim() - 2)].detach()
    ref = w_pos[: row.shape[0]].detach().to(row)
    with torch.no_grad():
        off = float((row - ref).abs().max()) if row.numel() else 0.0
        scale = 1.0 + float(ref.abs().max()) if ref.numel() else 1.0
    tol = 1e-4 if row.dtype in (torch.float32, torch.float64) else 3e-2
    if not off <= tol * scale:
        raise CacheMismatchError(
            f"cache: its hook_pos_embed is not this model's position embedding (off by {off:.3g}): it was taken from "
            "another model with the same sizes (or under a hook on hook_pos_embed), so per-head terms and logit "
            "attributions through this model's weights would be wrong; decompose it with the model that made it"
        )


def term_name(what: str, layer: int) -> str:
    """The hook that holds a term of stream_layout.site_terms: hook_embed, hook_pos_embed, blocks.L.hook_*_out."""
    if what in ("embed", "pos_embed"):
        return f"hook_{what}"
    return f"blocks.{layer}.hook_{'mlp' if what == 'mlp' else 'attn'}_out"


def fitting_wirings(cache: Any, stream: Tensor, layer: int, kind: str, lay: Layout) -> list[str]:
    """The residual wirings (full, attn_only, ffn_only, none) other than lay's under which the cached terms sum to
    stream (several where they agree at this site): what a cache from a model of another wiring shows."""
    keys = set(cache.keys())
    fits = []
    for (attn, ffn), name in WIRING_NAMES.items():
        if (attn, ffn) == (lay.attn_residual, lay.ffn_residual):
            continue
        other = replace(lay, attn_residual=attn, ffn_residual=ffn)
        names = [term_name(what, l) for what, l in site_terms(layer, kind, other)]
        if not all(n in keys for n in names):
            continue
        with torch.no_grad():
            total = sum((cache[n] for n in names), torch.zeros_like(stream))
            off = float((total - stream).abs().max()) if stream.numel() else 0.0
            scale = max(1.0, float(stream.abs().max())) if stream.numel() else 1.0
        if off <= (1e-4 if stream.dtype in (torch.float32, torch.float64) else 3e-2) * scale:
            fits.append(name)
    return fits


__all__ = ["WIRING_NAMES", "check_cache_origin", "fitting_wirings", "term_name"]
