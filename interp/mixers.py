"""Token mixers for the attention slot of a block.

CausalAttention  softmax attention with an optional bias on the self score.
UniformMixer     every causal score equal: position t takes the mean of values 0..t.
PositionBlind    a per-position GELU MLP d -> 2d -> d: mixes nothing across positions.

Attention has two paths (docs/DESIGN.md contract 2): the fused
F.scaled_dot_product_attention path used in training, and an explicit softmax
path that fills hook_attn_scores / hook_pattern. The explicit path runs only
when a hook sits on one of those two hook points (run_with_cache puts one on
every hook point; nnsight's wrapper replaces their forward) or when `explicit`
is set on the module. The fused path passes is_causal=True when the mask is
plain causal (self_bias 0, which includes the uniform mixer) and builds an
additive mask only otherwise (`causal_kernel` False forces the mask, for
benchmarks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from jaxtyping import Bool, Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp.config import ModelConfig


def _hooked(hook: HookPoint) -> bool:
    """Whether anything reads the hook point: a TL or torch hook, or a replaced forward (nnsight's tracing)."""
    return bool(hook.fwd_hooks or hook.bwd_hooks or hook._forward_hooks) or "forward" in hook.__dict__


def allowed_keys(cfg: ModelConfig, n: int, device: torch.device) -> Bool[Tensor, "q k"]:
    """Which keys each query may read: causal, then +/-inf self_bias applied."""
    allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=device)
    if cfg.self_bias == math.inf:
        allowed = eye
    elif cfg.self_bias == -math.inf:
        allowed = allowed & ~eye
    return allowed


class _PatternMixer(nn.Module):
    """Shared tail of the two pattern-based mixers: pattern @ v -> z -> W_O."""

    def __init__(self, cfg: ModelConfig, n_proj: int):
        super().__init__()
        self.cfg = cfg
        self.explicit = False
        self.causal_kernel = True
        self.in_proj = nn.Linear(cfg.d_model, n_proj * cfg.d_model, bias=cfg.bias)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    def _wants_pattern(self) -> bool:
        return self.explicit or _hooked(self.hook_attn_scores) or _hooked(self.hook_pattern)

    def _heads(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p h dh"]:
        return rearrange(x, "b p (h dh) -> b p h dh", h=self.cfg.n_heads)

    def _mix(
        self,
        q: Float[Tensor, "b p h dh"],
        k: Float[Tensor, "b p h dh"],
        v: Float[Tensor, "b p h dh"],
        scores_fn,
    ) -> Float[Tensor, "b p d"]:
        if self._wants_pattern():
            z = self._explicit(q, k, v, scores_fn)
        elif self.cfg.self_bias == 0.0 and self.causal_kernel:
            z = self._sdpa(q, k, v, is_causal=True)
        else:
            z = self._masked_sdpa(q, k, v)
        z = self.hook_z(z)
        return self.out_proj(rearrange(z, "b p h dh -> b p (h dh)"))

    def _sdpa(self, q, k, v, **mask) -> Float[Tensor, "b p h dh"]:
        z = F.scaled_dot_product_attention(
            rearrange(q, "b p h dh -> b h p dh"),
            rearrange(k, "b p h dh -> b h p dh"),
            rearrange(v, "b p h dh -> b h p dh"),
            dropout_p=self.cfg.dropout if self.training else 0.0,
            **mask,
        )
        return rearrange(z, "b h p dh -> b p h dh")

    def _masked_sdpa(self, q, k, v) -> Float[Tensor, "b p h dh"]:
        n = v.shape[1]
        allowed = allowed_keys(self.cfg, n, v.device)
        empty = ~allowed.any(-1)  # a query with no allowed key (position 0 under self_bias=-inf) reads nothing
        mask = allowed | torch.diag(empty)  # give empty rows a key, zero them below
        bias = torch.zeros(n, n, device=v.device, dtype=v.dtype).masked_fill(~mask, -math.inf)
        if math.isfinite(self.cfg.self_bias) and self.cfg.self_bias != 0.0:
            bias = bias + self.cfg.self_bias * torch.eye(n, device=v.device, dtype=v.dtype)
        z = self._sdpa(q, k, v, attn_mask=bias)
        return z.masked_fill(empty[None, :, None, None], 0.0) if empty.any() else z

    def _explicit(self, q, k, v, scores_fn) -> Float[Tensor, "b p h dh"]:
        allowed = allowed_keys(self.cfg, v.shape[1], v.device)
        empty = ~allowed.any(-1)
        scores = self.hook_attn_scores(scores_fn(q, k).masked_fill(~allowed, -math.inf))
        safe = scores.masked_fill(empty[:, None], 0.0)
        pattern = torch.softmax(safe, dim=-1).masked_fill(empty[:, None], 0.0)
        pattern = self.hook_pattern(pattern)
        return einsum(self.attn_dropout(pattern), v, "b h q k, b k h dh -> b q h dh")


class CausalAttention(_PatternMixer):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=3)

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        q, k, v = self.in_proj(x).split(self.cfg.d_model, dim=-1)
        q, k, v = self.hook_q(self._heads(q)), self.hook_k(self._heads(k)), self.hook_v(self._heads(v))
        scale = 1.0 / math.sqrt(self.cfg.d_head)
        bias = self.cfg.self_bias if math.isfinite(self.cfg.self_bias) else 0.0

        def scores(q, k):
            s = einsum(q, k, "b q h dh, b k h dh -> b h q k") * scale
            if bias:
                s = s + bias * torch.eye(s.shape[-1], device=s.device, dtype=s.dtype)
            return s

        return self._mix(q, k, v, scores)


class UniformMixer(_PatternMixer):
    """Attention with every causal score equal: no content-based routing.

    Has only a value and an output projection; q and k are zeros, so the fused
    path is the same SDPA kernel (with attention dropout) as real attention.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=1)

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        v = self.hook_v(self._heads(self.in_proj(x)))
        zeros = torch.zeros_like(v)
        self.hook_q(zeros), self.hook_k(zeros)  # fire for caches; TransformerLens's zero W_Q/W_K give these

        def scores(q, k):
            b, n, h, _ = v.shape
            return torch.zeros(b, h, n, n, device=v.device, dtype=v.dtype)

        return self._mix(zeros, zeros, v, scores)


class PositionBlind(nn.Module):
    """GELU MLP d -> 2d -> d at each position: 4 d^2 weights, as bias-free attention."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.in_proj = nn.Linear(cfg.d_model, 2 * cfg.d_model, bias=cfg.bias)
        self.out_proj = nn.Linear(2 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        return self.out_proj(self.hook_post(F.gelu(self.hook_pre(self.in_proj(x)))))


def make_mixer(cfg: ModelConfig) -> nn.Module:
    return {"attention": CausalAttention, "uniform": UniformMixer, "position_blind": PositionBlind}[
        cfg.mixer
    ](cfg)
