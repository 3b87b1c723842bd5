"""Token mixers for the attention slot of a block, each declaring what it can do.

CausalAttention  softmax attention with an optional bias on the self score.
UniformMixer     every causal score equal: position t takes the mean of values 0..t.
PositionBlind    a per-position GELU MLP d -> 2d -> d (interp.model.sublayers.MLP): mixes nothing across positions.

Every mixer is one class registered by name (interp.config.registry.register_mixer)
whose class attributes and methods (the `Mixer` base below) say what the rest of
the toolkit may do with it: its attention pattern (alpha_tt, plot_attention),
its heads (per-head decomposition), its hook sites, its TransformerLens export
(weights into TL's attention slots and the routing of TL's scores) or why it
has none, its parameters (`params`, held by ModelConfig.mixer_params). Nothing
else names a mixer. Adding one: subclass `Mixer` (with an nn.Module) or
`PatternMixer`, declare, decorate with @register_mixer, and import the module
before building a ModelConfig that names it; tests/test_mixer_in_one_file.py
does this for a windowed attention with its window as a parameter, and
tests/test_mixer_registry.py for toy mixers, without touching the package.

Attention has two paths (docs/DESIGN.md contract 2): the fused
F.scaled_dot_product_attention path used in training, and an explicit softmax
path that fills hook_attn_scores / hook_pattern. The explicit path runs only
when a hook sits on one of those two hook points (run_with_cache puts one on
every hook point; nnsight's wrapper replaces their forward) or when `explicit`
is set on the module. Both read the keys a query may see from the mixer's
key_mask. The fused path passes is_causal=True when that is the plain causal
mask (PatternMixer.plain_causal: self_bias 0, key_mask not overridden, which
includes the uniform mixer) and builds an additive mask from key_mask only
otherwise (`causal_kernel` False forces the mask, for benchmarks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from jaxtyping import Bool, Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_spec, register_mixer
from interp.errors import ConfigError
from interp.model.dropout import StreamDropout
from interp.model.sublayers import MLP, is_hooked

TL_SLOTS = ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "b_O")  # TransformerLens's attention weights

# take(name, like=None): the mixer's parameter `name` (relative to the mixer), detached and counted as exported;
# a missing one (a bias with bias=False) is zeros like `like`.
Take = Callable[..., Tensor]


class Mixer:
    """What a token mixer declares next to its forward. Mix it into an nn.Module subclass.

    name             the ModelConfig.mixer value (register with interp.config.registry.register_mixer)
    has_pattern      fills hook_attn_scores / hook_pattern [batch, head, q, k] (alpha_tt, plot_attention)
    has_heads        writes hook_z [batch, pos, head, d_head] through head_weights(): per-head decomposition
    takes_self_bias  ModelConfig.self_bias applies to it
    params           its parameters and their defaults (bool, int, float or str): ModelConfig.mixer_params
                     holds them, defaults filled (check_params may refuse a value), and the variant name
                     (training.run_config.variant_name) spells each, so two values never share a run directory
    replaces_scores  its scores are not q . k / sqrt(d_head) plus a routing term: tl_scores replaces them
                     (interp.reading.scores.routing_bias then refuses; attention_scores rebuilds them)
    hook_sites       its hook points, under blocks.{l}.attn
    no_tl_equivalent why it has no TransformerLens export, when it declares none (tl_weights)
    """

    name: ClassVar[str]
    has_pattern: ClassVar[bool] = False
    has_heads: ClassVar[bool] = False
    takes_self_bias: ClassVar[bool] = False
    params: ClassVar[dict[str, Any]] = {}
    replaces_scores: ClassVar[bool] = False
    hook_sites: ClassVar[tuple[str, ...]] = ()
    no_tl_equivalent: ClassVar[str] = "it declares no TransformerLens export (tl_weights)"

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """Raise ConfigError for a parameter value the mixer cannot take (types are checked already)."""

    @classmethod
    def pattern_is_causal_uniform(cls, cfg: ModelConfig) -> bool:
        """Whether its pattern is 1/(t+1) on keys 0..t whatever its weights (interventions.uniform_pattern is
        then a no-op)."""
        return False

    @classmethod
    def exports_to_tl(cls) -> bool:
        return cls.tl_weights is not Mixer.tl_weights

    @classmethod
    def refuse_tl(cls) -> ConfigError:
        return ConfigError(
            f"mixer={cls.name!r} has no TransformerLens equivalent ({cls.no_tl_equivalent}); analyse this "
            "checkpoint with ResidualGPT and its own hooks instead"
        )

    def tl_weights(self, take: Take) -> dict[str, Tensor]:
        """This mixer's weights in TL's attention slots (TL_SLOTS, TL's layout, before runtime_gain)."""
        raise self.refuse_tl()

    @classmethod
    def tl_routes_scores(cls, cfg: ModelConfig) -> bool:
        """Whether TL's hook_attn_scores must apply tl_scores (what TL's plain softmax attention lacks)."""
        return False

    @classmethod
    def tl_scores(cls, cfg: ModelConfig, scores: Float[Tensor, "b h q k"]) -> Float[Tensor, "b h q k"]:
        """TL's causally masked scores made this mixer's (q is the last n_q positions under a kv cache)."""
        return scores

    @classmethod
    def tl_routing_record(cls, cfg: ModelConfig) -> dict[str, Tensor]:
        """Buffers that name the routing in the export's state dict (a plain HookedTransformer refuses them):
        the mixer, and each numeric parameter's value."""
        numeric = {k: v for k, v in cfg.mixer_params.items() if not isinstance(v, str)}
        return {
            f"routing_{cls.name}": torch.tensor(True),
            **{f"routing_{cls.name}_{k}": torch.tensor(v) for k, v in numeric.items()},
        }

    def head_weights(self) -> tuple[Float[Tensor, "h dh d"], Tensor | None] | None:
        """(W_O per head, b_O) as written into the residual before runtime_gain, or None without heads."""
        return None


def allowed_keys(cfg: ModelConfig, n: int, device: torch.device) -> Bool[Tensor, "q k"]:
    """Which keys each query may read: causal, then +/-inf self_bias applied."""
    allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=device)
    if cfg.self_bias == math.inf:
        allowed = eye
    elif cfg.self_bias == -math.inf:
        allowed = allowed & ~eye
    return allowed


class PatternMixer(Mixer, nn.Module):
    """Base of the softmax-pattern mixers: in_proj of n_proj * d_model, pattern @ v -> z -> out_proj (W_O).

    A subclass splits in_proj into q, k, v in forward (calling _mix) and in tl_qkv (for the export).
    Which keys a query may read is key_mask (causal, then self_bias); a subclass that reads fewer (a
    window, a stride) overrides key_mask, and both paths use it: the explicit one masks its scores with
    it, the fused one passes it to SDPA (its is_causal kernel only while key_mask is this class's and
    self_bias is 0: plain_causal).
    """

    has_pattern = True
    has_heads = True
    hook_sites = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")

    def __init__(self, cfg: ModelConfig, n_proj: int):
        super().__init__()
        self.cfg = cfg
        self.explicit = False
        self.causal_kernel = True
        self.in_proj = nn.Linear(cfg.d_model, n_proj * cfg.d_model, bias=cfg.bias)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.attn_dropout = StreamDropout(cfg.dropout)
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    @classmethod
    def exports_to_tl(cls) -> bool:
        return cls.tl_qkv is not PatternMixer.tl_qkv or cls.tl_weights is not PatternMixer.tl_weights

    def tl_qkv(self, w_in: Tensor, b_in: Tensor) -> tuple[tuple[Tensor, Tensor], ...]:
        """((w_q, b_q), (w_k, b_k), (w_v, b_v)) from in_proj, rows (h dh); zeros where the mixer has none."""
        raise self.refuse_tl()

    def tl_weights(self, take: Take) -> dict[str, Tensor]:
        heads = dict(h=self.cfg.n_heads)
        w_in = take("in_proj.weight")  # [n_proj * d, d]: rows are (h dh) outputs
        b_in = take("in_proj.bias", w_in[:, 0])
        sd = {}
        for name, (w, bias) in zip("QKV", self.tl_qkv(w_in, b_in), strict=True):
            sd[f"W_{name}"] = rearrange(w, "(h dh) d -> h d dh", **heads)
            sd[f"b_{name}"] = rearrange(bias, "(h dh) -> h dh", **heads)
        w_o = take("out_proj.weight")
        sd["W_O"] = rearrange(w_o, "d (h dh) -> h dh d", **heads)
        sd["b_O"] = take("out_proj.bias", w_o[:, 0])
        return sd

    def head_weights(self) -> tuple[Float[Tensor, "h dh d"], Tensor | None]:
        w_o = rearrange(self.out_proj.weight, "d (h dh) -> h dh d", h=self.cfg.n_heads)
        return w_o, self.out_proj.bias

    def key_mask(self, n: int, device: torch.device) -> Bool[Tensor, "q k"]:
        """Which keys each of n queries may read (True: allowed); both paths read it."""
        return allowed_keys(self.cfg, n, device)

    def plain_causal(self) -> bool:
        """Whether key_mask is the plain causal mask, so the fused path may take SDPA's is_causal kernel."""
        return self.cfg.self_bias == 0.0 and type(self).key_mask is PatternMixer.key_mask

    def _wants_pattern(self) -> bool:
        return self.explicit or is_hooked(self.hook_attn_scores) or is_hooked(self.hook_pattern)

    def _stream_dropout(self) -> bool:
        """Attention dropout from the run's stream (interp.model.dropout): SDPA draws its own masks, so the
        explicit path."""
        return self.training and self.cfg.dropout > 0 and self.attn_dropout.stream() is not None

    def _heads(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p h dh"]:
        return rearrange(x, "b p (h dh) -> b p h dh", h=self.cfg.n_heads)

    def _mix(
        self, q: Float[Tensor, "b p h dh"], k: Float[Tensor, "b p h dh"], v: Float[Tensor, "b p h dh"], scores_fn
    ) -> Float[Tensor, "b p d"]:
        if self._wants_pattern() or self._stream_dropout():
            z = self._explicit(q, k, v, scores_fn)
        elif self.causal_kernel and self.plain_causal():
            z = self._sdpa(q, k, v, is_causal=True)
        else:
            z = self._masked_sdpa(q, k, v)
        z = self.hook_z(z)
        return self.out_proj(rearrange(z, "b p h dh -> b p (h dh)"))

    def _sdpa(self, q, k, v, **mask) -> Float[Tensor, "b p h dh"]:
        q, k, v = (rearrange(t, "b p h dh -> b h p dh") for t in (q, k, v))
        z = F.scaled_dot_product_attention(q, k, v, dropout_p=self.cfg.dropout if self.training else 0.0, **mask)
        return rearrange(z, "b h p dh -> b p h dh")

    def _masked_sdpa(self, q, k, v) -> Float[Tensor, "b p h dh"]:
        n = v.shape[1]
        allowed = self.key_mask(n, v.device)
        empty = ~allowed.any(-1)  # a query with no allowed key (position 0 under self_bias=-inf) reads nothing
        mask = allowed | torch.diag(empty)  # give empty rows a key, zero them below
        bias = torch.zeros(n, n, device=v.device, dtype=v.dtype).masked_fill(~mask, -math.inf)
        if math.isfinite(self.cfg.self_bias) and self.cfg.self_bias != 0.0:
            bias = bias + self.cfg.self_bias * torch.eye(n, device=v.device, dtype=v.dtype)
        z = self._sdpa(q, k, v, attn_mask=bias)
        return z.masked_fill(empty[None, :, None, None], 0.0) if empty.any() else z

    def _explicit(self, q, k, v, scores_fn) -> Float[Tensor, "b p h dh"]:
        allowed = self.key_mask(v.shape[1], v.device)
        empty = ~allowed.any(-1)
        scores = self.hook_attn_scores(scores_fn(q, k).masked_fill(~allowed, -math.inf))
        safe = scores.masked_fill(empty[:, None], 0.0)
        pattern = torch.softmax(safe, dim=-1).masked_fill(empty[:, None], 0.0)
        pattern = self.hook_pattern(pattern)
        return einsum(self.attn_dropout(pattern), v, "b h q k, b k h dh -> b q h dh")


@register_mixer
class CausalAttention(PatternMixer):
    name = "attention"
    takes_self_bias = True

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=3)

    def tl_qkv(self, w_in, b_in):
        return tuple(zip(w_in.chunk(3), b_in.chunk(3), strict=True))

    @classmethod
    def tl_routes_scores(cls, cfg: ModelConfig) -> bool:
        return cfg.self_bias != 0.0

    @classmethod
    def tl_scores(cls, cfg, scores):
        """self_bias finite: added to each query's score on itself; +inf: every other key -inf; -inf: the
        self key -inf (row 0 is then all -inf and TL turns its NaN pattern into zeros, as ResidualGPT does)."""
        n_q, n_k = scores.shape[-2:]
        offset = n_k - n_q  # queries are the last n_q positions when generating with a kv cache
        q_pos = torch.arange(offset, n_k, device=scores.device)
        is_self = q_pos[:, None] == torch.arange(n_k, device=scores.device)[None, :]
        if cfg.self_bias == math.inf:
            return scores.masked_fill(~is_self, -math.inf)
        if cfg.self_bias == -math.inf:
            return scores.masked_fill(is_self, -math.inf)
        return scores + cfg.self_bias * is_self.to(scores.dtype)

    @classmethod
    def tl_routing_record(cls, cfg):
        return {"routing_self_bias": torch.tensor(cfg.self_bias), "routing_uniform": torch.tensor(False)}

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


@register_mixer
class UniformMixer(PatternMixer):
    """Attention with every causal score equal: no content-based routing.

    Has only a value and an output projection; q and k are zeros, so the fused
    path is the same SDPA kernel (with attention dropout) as real attention.
    Exported with zero W_Q / W_K, and TL's scores set to 0 wherever not masked.
    """

    name = "uniform"
    replaces_scores = True

    @classmethod
    def pattern_is_causal_uniform(cls, cfg: ModelConfig) -> bool:
        return True

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, n_proj=1)

    def tl_qkv(self, w_in, b_in):
        zeros = (torch.zeros_like(w_in), torch.zeros_like(b_in))
        return zeros, zeros, (w_in, b_in)

    @classmethod
    def tl_routes_scores(cls, cfg: ModelConfig) -> bool:
        return True

    @classmethod
    def tl_scores(cls, cfg, scores):
        return scores.masked_fill(scores != -math.inf, 0.0)  # whatever W_Q / W_K hold

    @classmethod
    def tl_routing_record(cls, cfg):
        return {"routing_self_bias": torch.tensor(cfg.self_bias), "routing_uniform": torch.tensor(True)}

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        v = self.hook_v(self._heads(self.in_proj(x)))
        zeros = torch.zeros_like(v)
        self.hook_q(zeros), self.hook_k(zeros)  # fire for caches; TransformerLens's zero W_Q/W_K give these

        def scores(q, k):
            b, n, h, _ = v.shape
            return torch.zeros(b, h, n, n, device=v.device, dtype=v.dtype)

        return self._mix(zeros, zeros, v, scores)


@register_mixer
class PositionBlind(MLP, Mixer):
    """GELU MLP d -> 2d -> d at each position: 4 d^2 weights, as bias-free attention. No pattern, no heads."""

    name = "position_blind"
    hook_sites = ("hook_pre", "hook_post")
    no_tl_equivalent = "its token mixer is a per-position MLP, not attention"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, d_hidden=2 * cfg.d_model)
        self.cfg = cfg


def make_mixer(cfg: ModelConfig) -> nn.Module:
    """The mixer cfg.mixer names, built for cfg (through the registry, as ResidualGPT's blocks do)."""
    return mixer_spec(cfg.mixer)(cfg)
