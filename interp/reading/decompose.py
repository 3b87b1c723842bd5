"""Exact additive decompositions of the residual stream, for every residual wiring.

In a full Pre-LN stack the residual at any site is embed + pos_embed + every
earlier attn_out and mlp_out, which is what TransformerLens's decompose_resid
stacks. Removing an identity path cuts that sum:

    resid_mid  = (resid_pre if attn_residual else 0) + attn_out
    resid_post = (resid_mid if ffn_residual  else 0) + mlp_out

so under attn_only the final residual is the last block's mlp_out alone, and
under ffn_only nothing written before a block's attention reaches past it.
`decompose` walks this wiring back from a site and returns only the terms that
reach it additively; their sum is the cached stream at that site (float
rounding only, in eval mode: dropout breaks every decomposition).

On top of it:

    direct_logit_attribution  each term's share of a logit (difference) through the
                              final LayerNorm with its scale frozen at the cached value;
                              the shares sum to the true logit (difference)
    logit_lens                every resid_post read through ln_final (statistics
                              recomputed per site) and the unembedding, with its
                              cross-entropy per layer

Every function takes a cache as a dict of tensors (ResidualGPT's run_with_cache)
or a transformer_lens ActivationCache (which carries its model), and the model:
a ResidualGPT or its export from interp.tl.hooked.to_hooked_transformer (with or
without TL's weight processing).

Which sites a model has and which terms reach each is interp.reading.stream_layout (Layout,
layout, wiring, resid_sites: named here too, as before the two were split).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from einops import einsum
from jaxtyping import Float, Int
from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.errors import ArgumentError, CacheMismatchError, DecompositionError, ShapeError
from interp.model.api import as_batch_pairs, check_ids
from interp.model.eval_mode import eval_mode
from interp.reading.cache_origin import WIRING_NAMES, check_cache_origin, fitting_wirings, term_name
from interp.reading.stream_layout import (
    Layout,
    block_head_weights,
    cached,
    layout,
    model_of,
    parse_site,
    resid_sites,
    site_terms,
    wiring,
)


@dataclass
class Components:
    """Terms that reach one residual site additively: stack[i] is labels[i]'s contribution."""

    labels: list[str]
    stack: Float[Tensor, "component ... d_model"]

    def total(self) -> Float[Tensor, "... d_model"]:
        return self.stack.sum(0)


@dataclass
class Attribution:
    """Direct logit attribution: values[i] is labels[i]'s share of `target`; values.sum(0) == target."""

    labels: list[str]
    values: Float[Tensor, "component ..."]
    target: Float[Tensor, "..."]  # the true logit (difference) from the cached ln_final output

    def total(self) -> Float[Tensor, "..."]:
        return self.values.sum(0)


def _check_heads_rebuild(
    cache: Any, layer: int, result: Float[Tensor, "head ... d_model"], bias: Tensor | None
) -> None:
    """Refuse when hook_z @ W_O (+ b_O) is not the cached hook_attn_out: the stream holds something else.

    A hook that replaced hook_attn_out (or hook_result) during the cached forward leaves hook_z as it was, so
    per-head terms rebuilt from it would miss what the stream actually got.
    """
    attn_out = cached(cache, f"blocks.{layer}.hook_attn_out")
    rebuilt = result.sum(0) + bias if bias is not None else result.sum(0)
    off = float((rebuilt - attn_out).abs().max().detach()) if attn_out.numel() else 0.0
    scale = float(attn_out.abs().max().detach()) if attn_out.numel() else 0.0
    tol = max(1e-4, 32 * torch.finfo(attn_out.dtype).eps) * (1.0 + scale)
    if not off <= tol:  # also refuses a NaN
        raise DecompositionError(
            f"per_head=True: at layer {layer} the heads (hook_z @ W_O + b_O) do not add up to the cached "
            f"blocks.{layer}.hook_attn_out (off by {off:.3g}): the cache was taken under an intervention on the "
            "attention output (a hook on hook_attn_out or hook_result), or in train mode with dropout, so "
            "per-head terms would miss what the stream got; use per_head=False, or take the cache without "
            "that hook (in eval mode)"
        )


def decompose(cache: Any, site: str, model: Any = None, *, per_head: bool = False) -> Components:
    """The terms that sum to the residual at `site` under this model's wiring.

    Labels follow TransformerLens: "embed", "pos_embed", "{l}_attn_out",
    "{l}_mlp_out"; with per_head, each surviving attn_out becomes "L{l}H{h}"
    (hook_z through that head's W_O) plus "{l}_attn_bias" when b_O is not zero.
    A mixer without heads (has_heads False, e.g. position_blind) keeps "{l}_attn_out" whole.
    per_head refuses (DecompositionError) when the heads do not rebuild the cached hook_attn_out, and
    every decomposition when its terms do not sum to the cached stream (a hook edited the stream).
    """
    model = _checked_model(cache, model, site)
    comps = _decompose(cache, site, model, per_head)
    _check_sum(cache, _stream_name(site, model), site, comps.stack, model)
    return comps


def _checked_model(cache: Any, model: Any, site: Any = "final") -> Any:
    """The model a cache is read with (model=, else the cache's own), once the cache is known to be its
    (interp.reading.cache_origin: another model, other sizes, an edited model.cfg are named, not guessed)."""
    if not callable(getattr(cache, "keys", None)):
        raise ArgumentError(f"cache: run_with_cache's cache (or a dict of its tensors), not {type(cache).__name__}")
    if not isinstance(site, str):
        raise ArgumentError(f"site: a residual site name (e.g. 'final', 'blocks.0.hook_resid_mid'), not {site!r:.40}")
    model = model_of(cache, model)
    check_cache_origin(cache, model)
    return model


def _stream_name(site: str, model: Any) -> str:
    layer, kind = parse_site(site, layout(model))
    return f"blocks.{layer}.hook_resid_{kind}"


def _decompose(cache: Any, site: str, model: Any, per_head: bool) -> Components:
    lay = layout(model)
    layer, kind = parse_site(site, lay)
    if per_head and not lay.heads_exact:
        raise DecompositionError(
            "per_head=True: this model normalises the attention output before hook_attn_out "
            "(use_normalization_before_and_after or a post-norm architecture), so hook_z @ W_O is not what a head "
            "adds to the stream; decompose with per_head=False"
        )
    labels: list[str] = []
    parts: list[Tensor] = []
    for what, l in site_terms(layer, kind, lay):
        heads = block_head_weights(model, l) if per_head and what == "attn" else None
        if heads is None:
            labels.append(what if what in ("embed", "pos_embed") else f"{l}_{what}_out")
            parts.append(cached(cache, term_name(what, l)))
            continue
        w_o, b_o = heads
        z = cached(cache, f"blocks.{l}.attn.hook_z")
        result = einsum(z, w_o.to(z.dtype), "... h dh, h dh d -> h ... d")
        bias = b_o.to(z.dtype).expand_as(result[0]) if b_o is not None else None
        _check_heads_rebuild(cache, l, result, bias)
        labels += [f"L{l}H{h}" for h in range(result.shape[0])]
        parts += list(result)
        if b_o is not None and bool(b_o.ne(0).any()):
            assert bias is not None  # made from b_o above
            labels.append(f"{l}_attn_bias")
            parts.append(bias)
    stack = torch.stack([p.expand_as(parts[0]) for p in parts])
    return Components(labels, stack)


def _check_sum(cache: Any, name: str, site: str, stack: Tensor, model: Any) -> None:
    """Refuse terms that do not add up to the cached stream: a cache from a model of another wiring (named when
    the terms sum under it), else a hook edited the stream itself (steering, patching a hook_resid_*), which no
    term records. A cache without the stream is not checked."""
    try:
        stream = cache[name]
    except (KeyError, TypeError):
        return
    if not isinstance(stream, Tensor) or stream.shape != stack.shape[1:]:
        return
    with torch.no_grad():
        off = (stack.sum(0) - stream).abs().max().item()
        scale = max(1.0, stream.abs().max().item())
    tol = 1e-4 if stream.dtype in (torch.float32, torch.float64) else 3e-2
    if not off <= tol * scale:
        lay = layout(model)
        layer, kind = parse_site(site, lay)
        other = fitting_wirings(cache, stream, layer, kind, lay)
        if other:
            ours = next(n for w, n in WIRING_NAMES.items() if w == (lay.attn_residual, lay.ffn_residual))
            raise CacheMismatchError(
                f"cache: the terms at {site} do not sum to the cached {name} under this model's wiring "
                f"(residual={ours!r}) but do under residual={' or '.join(map(repr, other))}: the cache was taken "
                "from a model of another wiring; decompose it with that model"
            )
        raise DecompositionError(
            f"the terms at {site} do not sum to the cached {name} (off by {off:.3g}): a hook changed the "
            "residual stream itself (steering or patching a hook_resid_* point), which no term records; take the "
            "cache without that hook, or add the edit to the terms yourself"
        )


def decomposition_error(cache: Any, site: str, model: Any = None, *, per_head: bool = False) -> float:
    """Largest |sum of the terms - cached stream| at a site (0 up to float rounding)."""
    model = _checked_model(cache, model, site)
    stream = cached(cache, _stream_name(site, model))
    return float((_decompose(cache, site, model, per_head).total() - stream).abs().max().detach())


# --------------------------------------------------------------------------- final LayerNorm and unembedding


@dataclass(frozen=True)
class FinalNorm:
    """The final norm as DLA needs it: LayerNorm centres, RMSNorm does not; None: no final norm at all."""

    kind: str | None  # "LN", "RMS" or None
    w: Tensor | None
    b: Tensor | None
    eps: float


def final_norm(model: Any) -> FinalNorm:
    """The final norm of a ResidualGPT, its export or a TL model (LN, LNPre, RMS, RMSPre, none)."""
    cfg = model.cfg
    if isinstance(cfg, ModelConfig):
        return FinalNorm("LN", model.ln_final.w, model.ln_final.b, 1e-5)
    ln = getattr(model, "ln_final", None)
    if ln is None or getattr(cfg, "normalization_type", "LN") is None:
        return FinalNorm(None, None, None, 0.0)
    from transformer_lens.components import LayerNorm, LayerNormPre, RMSNorm, RMSNormPre

    if isinstance(ln, (RMSNorm, RMSNormPre)):
        kind = "RMS"
    elif isinstance(ln, (LayerNorm, LayerNormPre)):
        kind = "LN"
    else:
        raise DecompositionError(f"final norm {type(ln).__name__} is neither a LayerNorm nor an RMSNorm")
    return FinalNorm(kind, getattr(ln, "w", None), getattr(ln, "b", None), float(cfg.eps))


def _refuse_soft_cap(model: Any, what: str) -> None:
    cap = getattr(model.cfg, "output_logits_soft_cap", 0.0)
    if cap and cap > 0:
        raise DecompositionError(
            f"{what}: this model soft-caps its logits (output_logits_soft_cap={cap}), so a logit is not a sum of "
            "per-component shares; decompose the stream (decompose) or read logit_lens instead"
        )


def _unembed_params(model: Any) -> tuple[Float[Tensor, "d_model d_vocab"], Tensor | None]:
    if isinstance(model.cfg, ModelConfig):
        return model.unembed.weight.T, None
    return model.W_U, getattr(model, "b_U", None)


def _final_scale(cache: Any, resid: Tensor, norm: FinalNorm) -> Float[Tensor, "... 1"]:
    """The final norm's scale as it was in the forward pass (TL caches it; otherwise recomputed)."""
    if "ln_final.hook_scale" in cache.keys():
        return cache["ln_final.hook_scale"]
    centred = resid - resid.mean(-1, keepdim=True) if norm.kind == "LN" else resid
    return (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()


def _directions(w_u: Tensor, tokens: Any, like: Tensor, arg: str = "tokens") -> Float[Tensor, "... d_model"]:
    tokens = check_ids(tokens, w_u.shape[1], arg, w_u.device)
    try:
        return w_u.T[tokens].expand(*like.shape[:-1], w_u.shape[0])
    except RuntimeError:  # one id per position whose shape is not the cache's [batch, pos]
        raise DecompositionError(
            f"tokens of shape {list(tokens.shape)} do not match the cache's positions {list(like.shape[:-1])}: "
            "give one id, or one per position"
        ) from None


def direct_logit_attribution(
    cache: Any,
    tokens: int | Int[Tensor, "..."],
    incorrect_tokens: int | Int[Tensor, "..."] | None = None,
    model: Any = None,
    *,
    per_head: bool = False,
) -> Attribution:
    """Each term's direct effect on logit[tokens] (- logit[incorrect_tokens]) at every position.

    The final LayerNorm is linear once its scale is frozen at the cached value:
    LN(x) = (x - mean x) / scale * w + b, so the logit splits exactly into one
    share per term of decompose(cache, "final") plus one "ln_final.b + b_U" share.
    Unlike TransformerLens's logit_attrs, w is applied here, so no fold_ln is needed.
    tokens: one id, or one per position (e.g. the next-token targets [batch, pos]).
    """
    model = _checked_model(cache, model)
    _refuse_soft_cap(model, "direct_logit_attribution")
    comps = decompose(cache, "final", model, per_head=per_head)
    n_layers = wiring(model)[0]
    resid = cached(cache, f"blocks.{n_layers - 1}.hook_resid_post")
    norm = final_norm(model)
    w, b = norm.w, norm.b
    w_u, b_u = _unembed_params(model)
    direction = _directions(w_u, tokens, resid)
    if incorrect_tokens is not None:
        direction = direction - _directions(w_u, incorrect_tokens, resid, "incorrect_tokens")
    stack = comps.stack
    if norm.kind == "LN":
        stack = stack - stack.mean(-1, keepdim=True)
    if norm.kind is not None:
        stack = stack / _final_scale(cache, resid, norm)
    if w is not None:
        stack = stack * w
    values = (stack * direction).sum(-1)
    unembed_bias = torch.zeros_like(values[0])
    if b_u is not None:
        unembed_bias = unembed_bias + b_u[torch.as_tensor(tokens, device=b_u.device)]
        if incorrect_tokens is not None:
            unembed_bias = unembed_bias - b_u[torch.as_tensor(incorrect_tokens, device=b_u.device)]
    labels = list(comps.labels)
    if b is not None or b_u is not None:
        labels.append("ln_final.b + b_U")
        ln_bias = (b * direction).sum(-1) if b is not None else 0.0
        values = torch.cat([values, (ln_bias + unembed_bias).expand_as(values[0])[None]])
    ln_out = cached(cache, "ln_final.hook_normalized") if norm.kind is not None else resid
    ln_out = ln_out * w if w is not None else ln_out
    ln_out = ln_out + b if b is not None else ln_out
    target = (ln_out * direction).sum(-1) + unembed_bias
    return Attribution(labels, values, target)


# --------------------------------------------------------------------------- logit lens


def lens_sites(n_layers: int) -> list[str]:
    """The logit lens reads the embedding output and every block's resid_post."""
    return ["blocks.0.hook_resid_pre", *(f"blocks.{layer}.hook_resid_post" for layer in range(n_layers))]


def lens_labels(n_layers: int) -> dict[str, str]:
    """Each logit-lens site -> TransformerLens's label for the same tensor in cache.accumulated_resid(
    return_labels=True): "0_pre", "1_pre", ..., "final_post" (blocks.L.hook_resid_post is the stream that enters
    block L + 1, which TL labels f"{L + 1}_pre"; the last block's is "final_post").

        sites, logits = logit_lens(cache, model)
        labels = [lens_labels(model.cfg.n_layers)[s] for s in sites]  # TL's, in the same order
    """
    sites = lens_sites(n_layers)
    return dict(zip(sites, [f"{layer}_pre" for layer in range(n_layers)] + ["final_post"], strict=True))


def logit_lens(cache: Any, model: Any = None) -> tuple[list[str], Float[Tensor, "site ... d_vocab"]]:
    """(sites, logits): each site through ln_final (its own statistics) and the unembedding.

    This is the standard logit lens and needs no additivity, so it is right for
    every wiring; the last site's logits are the model's own. sites are hook names, each a key of the cache
    (blocks.0.hook_resid_pre, then every block's hook_resid_post); lens_labels maps them to TransformerLens's
    accumulated_resid labels (0_pre, 1_pre, ..., final_post), which name the same tensors in the same order.
    """
    model = _checked_model(cache, model)
    sites = lens_sites(wiring(model)[0])
    ln_final = getattr(model, "ln_final", None) if final_norm(model).kind is not None else None
    cap = getattr(model.cfg, "output_logits_soft_cap", 0.0) or 0.0
    with torch.no_grad():
        logits = torch.stack(
            [model.unembed(ln_final(x) if ln_final is not None else x) for x in (cached(cache, s) for s in sites)]
        )
        if cap > 0:  # as the model's own forward does
            logits = cap * torch.tanh(logits / cap)
    return sites, logits


def logit_lens_ce(cache: Any, targets: Int[Tensor, "..."], model: Any = None) -> dict[str, list]:
    """{"sites", "ce"}: the logit lens's mean cross-entropy (nats) on targets at each site."""
    sites, logits = logit_lens(cache, model)
    targets = check_ids(targets, logits.shape[-1], "targets", logits.device)
    if tuple(targets.shape) != tuple(logits.shape[1:-1]):
        raise ShapeError(
            f"targets: shape {tuple(targets.shape)} is not the cache's positions {tuple(logits.shape[1:-1])}"
        )
    targets = targets.reshape(-1)
    ce = [float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), targets)) for lg in logits]
    return {"sites": sites, "ce": ce}


@torch.no_grad()
def logit_lens_over(model: Any, batches: Iterable[tuple[Tensor, Tensor]]) -> dict[str, list]:
    """{"sites", "layers", "ce"}: logit-lens cross-entropy per site, averaged over (x, y) batches, eval mode.

    layers labels the sites "embed", "0", "1", ...: the residual after that many blocks (lens_labels gives
    TransformerLens's accumulated_resid labels for the sites).
    """
    n_layers = wiring(model)[0]
    sites = lens_sites(n_layers)
    sums = [0.0] * len(sites)
    count = 0
    device = next(model.parameters()).device
    with eval_mode(model):
        for x, y in as_batch_pairs(batches):
            cache: dict[str, Tensor] = {}

            def keep(t, hook):
                cache[hook.name] = t

            with model.hooks(fwd_hooks=[(lambda name: name in sites, keep)]):
                model(x.to(device))
            result = logit_lens_ce(cache, y.to(device), model)
            for i, ce in enumerate(result["ce"]):
                sums[i] += ce * y.numel()
            count += y.numel()
    if not count:
        raise DecompositionError("no batches to read")
    return {"sites": sites, "layers": ["embed", *map(str, range(n_layers))], "ce": [s / count for s in sums]}


__all__ = [
    "Attribution",
    "Components",
    "DecompositionError",
    "FinalNorm",
    "Layout",
    "final_norm",
    "layout",
    "decompose",
    "decomposition_error",
    "direct_logit_attribution",
    "lens_labels",
    "lens_sites",
    "logit_lens",
    "logit_lens_ce",
    "logit_lens_over",
    "resid_sites",
    "wiring",
]
