"""K same-shape ResidualGPTs as one module: every weight stacked on a leading member axis.

One forward advances all K members with batched matmuls (torch.bmm over the member axis), so
the per-operation overhead that dominates a small model's step is paid once for K models.
Members may differ in residual wiring (a per-member gate on each identity path), self_bias
(a per-member additive mask), runtime_gain and initialisation; everything that sets a shape
(depth, width, heads, n_ctx, vocabulary, bias, tying) and the mixer are shared.

The stacked tensors carry ResidualGPT's own state-dict names, so member k's weights are
`{name: p[k]}` and load into a ResidualGPT unchanged (training.steps copies them back). Summing the K losses
gives each member exactly the gradient its solo run would get: no tensor mixes members.

Dropout: member k's masks are the ones its solo run draws (interp.model.dropout: its own stream, seeded by its
run, keyed by micro-step and site), drawn at each site in the solo shape and stacked; with dropout the
attention takes the explicit softmax path, as the solo one does, since SDPA draws its own masks.
"""

from __future__ import annotations

import math
from dataclasses import fields

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.config.model_config import ModelConfig
from interp.errors import ConfigError
from interp.model.dropout import apply_keep
from interp.model.gpt import ResidualGPT

# ModelConfig fields a member may set on its own; every other field must agree across the ensemble.
PER_MEMBER_MODEL = ("residual", "self_bias", "runtime_gain", "init_std")
STACKABLE_MIXERS = ("attention",)  # the others train alone (training.grouping.group_key)


def shape_key(cfg: ModelConfig) -> tuple:
    """What must be equal for two configs to share a StackedGPT."""
    return tuple((f.name, getattr(cfg, f.name)) for f in fields(cfg) if f.name not in PER_MEMBER_MODEL)


def why_not_stackable(cfg: ModelConfig) -> str | None:
    """None when cfg can be a member, else why it trains alone."""
    if cfg.mixer not in STACKABLE_MIXERS:
        return f"mixer {cfg.mixer!r} has no stacked forward"
    return None


def _self_mask(self_bias: float, n: int, device: torch.device) -> Float[Tensor, "q k"]:
    """The additive score mask of one member: causal, then its self_bias (+inf: self only; -inf: no self).
    Position 0 under -inf has no key: it keeps its own key here and its output is zeroed (empty_rows)."""
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    eye = torch.eye(n, dtype=torch.bool, device=device)
    if self_bias == math.inf:
        allowed = eye
    elif self_bias == -math.inf:
        allowed = (causal & ~eye) | torch.diag(~(causal & ~eye).any(-1))
    else:
        allowed = causal
    mask = torch.zeros(n, n, device=device).masked_fill(~allowed, -math.inf)
    if math.isfinite(self_bias) and self_bias != 0.0:
        mask = mask + self_bias * eye
    return mask


class StackedGPT(nn.Module):
    """K ResidualGPTs of one shape. forward(tokens [K, B, T], targets) -> per-member mean losses [K]."""

    def __init__(self, members: list[ResidualGPT]):
        super().__init__()
        if not members:
            raise ConfigError("an ensemble needs at least one member")
        cfgs = [m.cfg for m in members]
        for cfg in cfgs:
            if why := why_not_stackable(cfg):
                raise ConfigError(f"cannot stack this model: {why}")
        if len({shape_key(c) for c in cfgs}) != 1:
            raise ConfigError(
                "ensemble members must share every shape field ("
                + ", ".join(f.name for f in fields(cfgs[0]) if f.name not in PER_MEMBER_MODEL)
                + ")"
            )
        self.cfg = cfgs[0]
        self.member_cfgs = [c.replace() for c in cfgs]  # plain copies, without the TL attributes bound to a model
        self.k = len(members)
        self.tied = self.cfg.tie_embeddings
        states = [m.state_dict() for m in members]
        self.names = [n for n, _ in members[0].named_parameters()]  # tied unembed appears once, as embed.weight
        self.params = nn.ParameterDict(
            {
                n.replace(".", "__"): nn.Parameter(torch.stack([s[n].detach().float() for s in states]).contiguous())
                for n in self.names
            }
        )
        gate = lambda flags: torch.tensor([1.0 if f else 0.0 for f in flags]).view(-1, 1, 1, 1)  # noqa: E731
        self.register_buffer("attn_gate", gate([c.attn_residual for c in cfgs]), persistent=False)
        self.register_buffer("ffn_gate", gate([c.ffn_residual for c in cfgs]), persistent=False)
        self.register_buffer("gain", torch.tensor([c.runtime_gain for c in cfgs]).view(-1, 1, 1, 1), persistent=False)
        self.same_attn = len({c.attn_residual for c in cfgs}) == 1
        self.same_ffn = len({c.ffn_residual for c in cfgs}) == 1
        self.same_gain = len({c.runtime_gain for c in cfgs}) == 1
        self.self_biases = [c.self_bias for c in cfgs]
        self.plain_causal = all(b == 0.0 for b in self.self_biases)
        self._masks: dict[tuple[int, str], tuple[Tensor, Tensor | None]] = {}
        # dropout: each member's stream slot (read at every forward: its Trainer sets the stream) and the sites
        # its solo model numbers (interp.model.dropout.number_sites), so the masks are the solo ones
        self.drop_p = self.cfg.dropout
        self._slots = [m._dropout_slot for m in members]
        first = members[0]
        self._embed_site = first.embed_dropout.site
        self._attn_sites = [b.attn.attn_dropout.site for b in first.blocks]
        self._resid_sites = [b.resid_dropout.site for b in first.blocks]
        self.resid_hook = None  # fn(site, tensor) at each resid_pre and the final resid (gradient probes)

    def p(self, name: str) -> Tensor:
        return self.params[name.replace(".", "__")]

    # ----- the forward ---------------------------------------------------------------------------------
    def _dropping(self) -> bool:
        return self.training and self.drop_p > 0

    def _drop(self, x: Float[Tensor, "k ..."], site: int) -> Float[Tensor, "k ..."]:
        """Dropout with each member's own mask from its stream (the solo mask, solo shape); with no stream set
        (a StackedGPT used by hand), torch's global generator over the stacked tensor, as nn.Dropout."""
        if not self._dropping():
            return x
        streams = [slot.stream for slot in self._slots]
        if any(s is None for s in streams):
            return F.dropout(x, self.drop_p, True)
        keep = torch.stack([s.keep(site, x.shape[1:], self.drop_p, x.device) for s in streams])  # type: ignore[union-attr]
        return apply_keep(x, keep, self.drop_p)

    def _linear(self, x: Float[Tensor, "k b t i"], prefix: str) -> Float[Tensor, "k b t o"]:
        w = self.p(f"{prefix}.weight")  # [k, o, i]
        k, b, t, i = x.shape
        flat = x.reshape(k, b * t, i)
        bias = self.params.get(f"{prefix}.bias".replace(".", "__"))
        if bias is None:
            return torch.bmm(flat, w.transpose(1, 2)).view(k, b, t, -1)
        return torch.baddbmm(bias[:, None, :], flat, w.transpose(1, 2)).view(k, b, t, -1)

    def _ln(self, x: Float[Tensor, "k b t d"], prefix: str) -> Float[Tensor, "k b t d"]:
        y = F.layer_norm(x, x.shape[-1:], eps=1e-5) * self.p(f"{prefix}.w")[:, None, None, :]
        bias = self.params.get(f"{prefix}.b".replace(".", "__"))
        return y if bias is None else y + bias[:, None, None, :]

    def _mask(self, n: int, device: torch.device) -> tuple[Tensor, Tensor | None]:
        key = (n, str(device))
        if key not in self._masks:
            masks = torch.stack([_self_mask(b, n, device) for b in self.self_biases])  # [k, q, k]
            empty = torch.tensor([b == -math.inf for b in self.self_biases], device=device)
            zero_first = None
            if empty.any():  # position 0 of a no-self member reads nothing: its output is zeroed
                zero_first = torch.ones(self.k, 1, 1, n, 1, device=device)
                zero_first[empty, :, :, 0] = 0.0
            self._masks[key] = (masks[:, None, None], zero_first)
        return self._masks[key]

    def _attention(self, x: Float[Tensor, "k b t d"], layer: int) -> Float[Tensor, "k b t d"]:
        # SDPA's fused CPU kernel takes 4-d inputs only: members and batch share its batch axis
        m, b, n, _ = x.shape
        qkv = self._linear(x, f"blocks.{layer}.attn.in_proj")
        q, k, v = (
            rearrange(t, "m b p (h dh) -> (m b) h p dh", h=self.cfg.n_heads)
            for t in qkv.split(self.cfg.d_model, dim=-1)
        )
        if self._dropping():  # the solo path's explicit softmax, each member's pattern dropped by its own mask
            z = self._explicit(q, k, v, m, b, n, layer)
        elif self.plain_causal:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask, zero_first = self._mask(n, x.device)
            mask = mask.to(q.dtype).expand(m, b, 1, n, n).reshape(m * b, 1, n, n)
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            if zero_first is not None:
                z = z * zero_first.expand(m, b, 1, n, 1).reshape(m * b, 1, n, 1)
        return self._linear(rearrange(z, "(m b) h p dh -> m b p (h dh)", m=m), f"blocks.{layer}.attn.out_proj")

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, m: int, b: int, n: int, layer: int) -> Tensor:
        mask, zero_first = self._mask(n, q.device)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.view(m, b, -1, n, n) + mask.to(scores.dtype)
        pattern = torch.softmax(scores, dim=-1)
        pattern = self._drop(pattern, self._attn_sites[layer]).reshape(m * b, -1, n, n)
        z = pattern.to(v.dtype) @ v
        if zero_first is not None:
            z = z * zero_first.expand(m, b, 1, n, 1).reshape(m * b, 1, n, 1)
        return z

    def _mlp(self, x: Float[Tensor, "k b t d"], layer: int) -> Float[Tensor, "k b t d"]:
        return self._linear(F.gelu(self._linear(x, f"blocks.{layer}.mlp.in_proj")), f"blocks.{layer}.mlp.out_proj")

    def _gained(self, out: Tensor) -> Tensor:
        if self.same_gain:
            return out * self.member_cfgs[0].runtime_gain if self.member_cfgs[0].runtime_gain != 1.0 else out
        return out * self.gain

    def _residual(self, stream: Tensor, out: Tensor, same: bool, gate: Tensor, keep: bool) -> Tensor:
        if same:
            return stream + out if keep else out
        return stream * gate + out

    def forward(self, tokens: Int[Tensor, "k b t"], targets: Int[Tensor, "k b t"]) -> Float[Tensor, " k"]:
        k, b, n = tokens.shape
        if k != self.k:
            raise ConfigError(f"expected tokens for {self.k} members, got {k}")
        vocab = self.cfg.d_vocab
        w_e = self.p("embed.weight")
        # one lookup per member: an embedding's backward sums repeated tokens in an order that depends on
        # how many indices it sees, and a member's gradient must not depend on the other members
        embed = torch.stack([F.embedding(tokens[m], w_e[m]) for m in range(k)])
        resid = self._drop(embed + self.p("pos_embed.weight")[:, None, :n], self._embed_site)
        first = self.member_cfgs[0]
        for layer in range(self.cfg.n_layers):
            if self.resid_hook is not None:
                self.resid_hook(f"blocks.{layer}.hook_resid_pre", resid)
            site = self._resid_sites[layer]
            attn_out = self._drop(self._attention(self._ln(resid, f"blocks.{layer}.ln1"), layer), site)
            attn_out = self._gained(attn_out)
            resid = self._residual(resid, attn_out, self.same_attn, self.attn_gate, first.attn_residual)
            mlp_out = self._gained(self._drop(self._mlp(self._ln(resid, f"blocks.{layer}.ln2"), layer), site + 1))
            resid = self._residual(resid, mlp_out, self.same_ffn, self.ffn_gate, first.ffn_residual)
        if self.resid_hook is not None:
            self.resid_hook(f"blocks.{self.cfg.n_layers - 1}.hook_resid_post", resid)
        w_u = self.p("embed.weight") if self.tied else self.p("unembed.weight")
        final = self._ln(resid, "ln_final")
        logits = torch.bmm(final.reshape(k, b * n, -1), w_u.transpose(1, 2))
        per_token = F.cross_entropy(
            logits.reshape(k * b * n, vocab).float(), targets.reshape(-1), ignore_index=-1, reduction="none"
        ).view(k, b * n)
        counted = (targets.reshape(k, b * n) != -1).sum(-1)
        # as F.cross_entropy's mean over the targets that count, summed member by member (see embed)
        return torch.stack([per_token[m].sum() for m in range(k)]) / counted


class StackedAdamW:
    """torch.optim.AdamW's update on stacked tensors, with a per-member lr and weight decay."""

    def __init__(
        self, params: dict[str, torch.Tensor], decay: dict[str, bool], betas: tuple[float, float], eps: float = 1e-8
    ):
        self.params, self.decay, self.betas, self.eps = params, decay, betas, eps
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}
        self.steps = 0

    @torch.no_grad()
    def step(self, lr: torch.Tensor, weight_decay: torch.Tensor) -> None:
        b1, b2 = self.betas
        self.steps += 1
        bc1, bc2 = 1 - b1**self.steps, 1 - b2**self.steps
        for n, p in self.params.items():
            shape = (-1,) + (1,) * (p.dim() - 1)
            if self.decay[n]:
                p.mul_(1 - (lr * weight_decay).view(shape))
            m, v = self.exp_avg[n], self.exp_avg_sq[n]
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.sub_((lr / bc1).view(shape) * m / denom)
