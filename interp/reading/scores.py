"""Attention scores as the model uses them, rebuilt from hook_q / hook_k: the routing W_Q @ W_K does not show.

A mixer may route the scores beyond q . k (what it declares in tl_routes_scores /
tl_scores, interp.model.mixers): CausalAttention's self_bias adds self_bias to each
query's score on itself (+inf keeps only the self key, -inf removes it) and the
uniform mixer sets every causal score to 0. ResidualGPT
adds it inside its score computation and the export inside its hook_attn_scores
hook point, so `model.QK` (W_Q @ W_K^T) and `einsum(q, k)` miss it: with
self_bias 4 the diagonal is off by 4.00. The export warns at model.QK / W_Q /
W_K (HiddenRoutingWarning); these helpers add the routing back.

    scores = attention_scores(model, cache["q", 0], cache["k", 0])   # == cache["attn_scores", 0]
    diag = routing_bias(model, n)                                     # the [n, n] term QK analysis must add
"""

from __future__ import annotations

import math
from typing import Any

import torch
from einops import einsum
from jaxtyping import Float
from torch import Tensor

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec
from interp.errors import ArgumentError, ConfigError
from interp.model.api import check_qk


def model_config(model: Any) -> ModelConfig:
    """The ModelConfig of a ResidualGPT or of its export (to_hooked_transformer / load_hooked on TransformerLens
    3, the bridge of to_transformer_bridge / load_bridge on TransformerLens 4)."""
    cfg = model if isinstance(model, ModelConfig) else getattr(model, "cfg", None)
    if isinstance(cfg, ModelConfig):
        return cfg
    inner_cfg = getattr(getattr(model, "residual_gpt", None), "cfg", None)  # a ResidualBridge's ResidualGPT
    if isinstance(inner_cfg, ModelConfig):
        return inner_cfg
    record = getattr(cfg, "residual_gpt_config", None)
    if record is None:
        raise ConfigError(
            "attention_scores takes a ResidualGPT or its export (interp.to_hooked_transformer, "
            "interp.to_transformer_bridge, interp.load_tl)"
        )
    return ModelConfig.from_dict(record)


def attention_scores(
    model: Any, q: Float[Tensor, "batch q_pos head d_head"], k: Float[Tensor, "batch k_pos head d_head"]
) -> Float[Tensor, "batch head q_pos k_pos"]:
    """hook_attn_scores as the model holds it: q . k / sqrt(d_head), causally masked, then the mixer's routing.

    q, k as cached (hook_q, hook_k). Queries are the last q_pos of the k_pos positions (a kv cache).
    """
    cfg = model_config(model)
    mixer = mixer_spec(cfg.mixer)
    if not mixer.has_pattern:
        raise ConfigError(f"mixer={cfg.mixer!r} has no attention scores")
    check_qk(q, k, cfg.n_heads, cfg.d_head)
    scores = einsum(q, k, "b q h dh, b k h dh -> b h q k") / math.sqrt(cfg.d_head)
    n_q, n_k = scores.shape[-2:]
    q_pos = torch.arange(n_k - n_q, n_k, device=scores.device)
    future = q_pos[:, None] < torch.arange(n_k, device=scores.device)[None, :]
    scores = scores.masked_fill(future, -math.inf)
    return mixer.tl_scores(cfg, scores) if mixer.tl_routes_scores(cfg) else scores


def routing_bias(model: Any, n: int, device: str | torch.device = "cpu") -> Float[Tensor, "q k"]:
    """The [n, n] term the routing adds to q . k / sqrt(d_head) on allowed keys (self_bias on the diagonal).

    0 where the mixer does not route; -inf where it forbids a key (self_bias -inf on the diagonal,
    +inf off it; a windowed mixer's keys before its window). A mixer that declares replaces_scores (the
    uniform mixer) replaces the scores rather than shifting them: use attention_scores.
    """
    cfg = model_config(model)
    spec = mixer_spec(cfg.mixer)
    if spec.replaces_scores:
        raise ConfigError(
            f"mixer={cfg.mixer!r} replaces the scores rather than adding to q . k (it declares "
            "replaces_scores); use attention_scores(model, q, k)"
        )
    if not spec.has_pattern:
        raise ConfigError(f"mixer={cfg.mixer!r} has no attention scores")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArgumentError(f"n: the number of positions, a positive int, not {n!r:.40}")
    zeros = torch.zeros(1, 1, n, n, device=device)
    return (spec.tl_scores(cfg, zeros) if spec.tl_routes_scores(cfg) else zeros)[0, 0]


__all__ = ["attention_scores", "model_config", "routing_bias"]
