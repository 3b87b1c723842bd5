"""How a model's residual stream is laid out, as interp.reading.decompose reads it: which sites it has and which
sublayer outputs reach each one, for a ResidualGPT, its TransformerLens export or bridge, or any TL model.

    wiring / layout      the model's residual paths and block shape (Layout)
    resid_sites          every distinct residual site
    parse_site           a site name to (layer, pre|mid|post), refused by name when the model has no such site
    site_terms           the sublayer outputs that reach a site additively, walked back along the wiring
    block_head_weights   a block's W_O, b_O as they write into the stream (None for a mixer without heads)
    model_of, cached     the model a cache came from; one cached activation, refused by name when missing
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxtyping import Float
from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import DecompositionError, ToolkitError


def model_of(cache: Any, model: Any) -> Any:
    if model is None:
        model = getattr(cache, "model", None)  # an ActivationCache knows its model
    if model is None:
        raise DecompositionError("pass model= (a ResidualGPT or its HookedTransformer) with a dict cache")
    return getattr(model, "residual_gpt", model)  # a TL 4 bridge (interp.tl.bridge) runs this ResidualGPT


def wiring(model: Any) -> tuple[int, bool, bool]:
    """(n_layers, attn_residual, ffn_residual) of a ResidualGPT, its export, or a ModelConfig."""
    cfg = model if isinstance(model, ModelConfig) else model.cfg
    if isinstance(cfg, ModelConfig):
        return cfg.n_layers, cfg.attn_residual, cfg.ffn_residual
    block = model.blocks[0]  # an exported HookedTransformer: its hook points say
    return cfg.n_layers, _path_kept(block, "hook_resid_mid"), _path_kept(block, "hook_resid_post")


def _path_kept(block: Any, site: str) -> bool:
    """Whether the export keeps the identity path into `site`: where it removed one, the hook point there carries
    the buffer residual_removed (interp.tl.hooked.rewire.NoResidualHookPoint)."""
    return getattr(getattr(block, site, None), "residual_removed", None) is None


# TransformerLens architectures whose block normalises a sublayer's output before hook_*_out (OLMo 2/3).
_POST_NORM = ("Olmo2ForCausalLM", "Olmo3ForCausalLM")


@dataclass(frozen=True)
class Layout:
    """How a model's residual stream is built, as decompose needs it (ResidualGPT, its export, or any TL model).

    pos_in_stream  hook_pos_embed is added to the stream (TL 'standard'; not shortformer, rotary, alibi)
    has_mlp        blocks have an MLP (not TL attn_only=True)
    has_mid        blocks have a resid_mid site (not attn_only, not parallel_attn_mlp)
    parallel       attention and MLP both read resid_pre: resid_post = resid_pre + attn_out + mlp_out
    heads_exact    hook_z through W_O is what the block adds (no LayerNorm after the attention)
    """

    n_layers: int
    attn_residual: bool
    ffn_residual: bool
    pos_in_stream: bool = True
    has_mlp: bool = True
    has_mid: bool = True
    parallel: bool = False
    heads_exact: bool = True


def layout(model: Any) -> Layout:
    """The Layout of a ResidualGPT, its export or a plain TransformerLens HookedTransformer."""
    n_layers, attn_residual, ffn_residual = wiring(model)
    cfg = model if isinstance(model, ModelConfig) else model.cfg
    if isinstance(cfg, ModelConfig):
        return Layout(n_layers, attn_residual, ffn_residual)
    attn_only = bool(getattr(cfg, "attn_only", False))
    parallel = bool(getattr(cfg, "parallel_attn_mlp", False)) and not attn_only
    post_norm = bool(getattr(cfg, "use_normalization_before_and_after", False)) or (
        getattr(cfg, "original_architecture", None) in _POST_NORM
    )
    return Layout(
        n_layers,
        attn_residual,
        ffn_residual,
        pos_in_stream=getattr(cfg, "positional_embedding_type", "standard") == "standard",
        has_mlp=not attn_only,
        has_mid=not attn_only and not parallel,
        parallel=parallel,
        heads_exact=not post_norm,
    )


def cached(cache: Any, name: str) -> Tensor:
    if name not in cache.keys():
        raise DecompositionError(
            f"the cache holds no {name!r}, which this decomposition needs; take the cache with "
            "run_with_cache(tokens) and no names_filter (or one that keeps it)"
        )
    return cache[name]


def resid_sites(n_layers: int) -> list[str]:
    """Every distinct residual site: the embedding output, then each block's resid_mid and resid_post."""
    sites = ["blocks.0.hook_resid_pre"]
    for layer in range(n_layers):
        sites += [f"blocks.{layer}.hook_resid_mid", f"blocks.{layer}.hook_resid_post"]
    return sites


def parse_site(site: str, lay: Layout) -> tuple[int, str]:
    n_layers = lay.n_layers
    if site in ("final", "ln_final.hook_in"):
        return n_layers - 1, "post"
    parts = site.split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() and parts[2].startswith("hook_resid_"):
        layer, kind = int(parts[1]), parts[2].removeprefix("hook_resid_")
        if kind == "mid" and not lay.has_mid and 0 <= layer < n_layers:
            why = "parallel_attn_mlp=True" if lay.parallel else "attn_only=True"
            raise DecompositionError(
                f"{site}: this model ({why}) has no resid_mid; decompose blocks.L.hook_resid_pre or _post"
            )
        if kind in ("pre", "mid", "post") and 0 <= layer < n_layers:
            return layer, kind
    raise DecompositionError(
        f"unknown residual site {site!r}: use blocks.L.hook_resid_pre|mid|post with L < {n_layers}, or 'final'"
    )


def site_terms(layer: int, kind: str, lay: Layout) -> list[tuple[str, int]]:
    """(kind, layer) of each sublayer output reaching the site, in forward order."""
    if kind == "pre" and layer == 0:
        return [("embed", 0), ("pos_embed", 0)] if lay.pos_in_stream else [("embed", 0)]
    if kind == "pre":
        return site_terms(layer - 1, "post", lay)
    if kind == "mid":
        return (site_terms(layer, "pre", lay) if lay.attn_residual else []) + [("attn", layer)]
    if not lay.has_mlp:  # TL attn_only: resid_post = resid_pre + attn_out
        return site_terms(layer, "pre", lay) + [("attn", layer)]
    if lay.parallel:  # both sublayers read resid_pre and write resid_post
        return site_terms(layer, "pre", lay) + [("attn", layer), ("mlp", layer)]
    return (site_terms(layer, "mid", lay) if lay.ffn_residual else []) + [("mlp", layer)]


def block_head_weights(model: Any, layer: int) -> tuple[Float[Tensor, "head d_head d_model"], Tensor | None] | None:
    """(W_O, b_O) of a block's attention as written into the residual, or None for a mixer without heads."""
    if isinstance(model.cfg, ModelConfig):
        cfg = model.cfg
        if not mixer_spec(cfg.mixer).has_heads:  # the mixer declares it (interp.model.mixers)
            return None
        heads = model.blocks[layer].attn.head_weights()
        if heads is None:  # declared, not delivered: per-head terms would be a guess
            raise ToolkitError(
                f"mixer {cfg.mixer!r} declares has_heads=True but its head_weights() gives None; "
                "return (W_O per head, b_O) from head_weights, or declare has_heads=False"
            )
        w_o, b_o = heads
        return w_o * cfg.runtime_gain, b_o * cfg.runtime_gain if b_o is not None else None
    attn = model.blocks[layer].attn
    return attn.W_O, getattr(attn, "b_O", None)
