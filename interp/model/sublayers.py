"""The sublayers a ResidualGPT block holds besides its mixer: LayerNorm and the MLP, with TransformerLens's hooks.

is_hooked says whether anything reads a hook point; LayerNorm and the pattern mixers (interp.model.mixers) take their
explicit, hooked path only then. The mixers build on MLP too (interp.model.mixers.PositionBlind is one per position).
tl_mlp_weights is the MLP's TransformerLens layout, which both majors' exports show.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp.config.model_config import ModelConfig


def is_hooked(hook: HookPoint) -> bool:
    """Whether anything reads the hook point: a TL or torch hook, or a replaced forward (nnsight's tracing)."""
    return bool(hook.fwd_hooks or hook.bwd_hooks or hook._forward_hooks) or "forward" in hook.__dict__


class LayerNorm(nn.Module):
    """LayerNorm (eps 1e-5), weight `w` and, when cfg.bias, bias `b`.

    As in TransformerLens, hook_scale holds sqrt(var + eps) [b, p, 1] and
    hook_normalized the normalised vector before w and b. The scale is computed
    explicitly (TL's formula) only when hook_scale is read (run_with_cache,
    which ActivationCache.apply_ln_to_stack needs, or nnsight); while nothing
    hooks either, one fused layer_norm applies w and b (no separate multiply).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.bias else None
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        if is_hooked(self.hook_scale):
            x = x - x.mean(-1, keepdim=True)
            x = x / self.hook_scale((x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt())
        elif not is_hooked(self.hook_normalized):
            return F.layer_norm(x, x.shape[-1:], self.w, self.b, eps=1e-5)
        else:
            x = F.layer_norm(x, x.shape[-1:], eps=1e-5)
        x = self.hook_normalized(x)
        return x * self.w + self.b if self.b is not None else x * self.w


class MLP(nn.Module):
    """GELU MLP d_model -> d_hidden (default cfg.d_mlp) -> d_model at each position."""

    def __init__(self, cfg: ModelConfig, d_hidden: int | None = None):
        super().__init__()
        d_hidden = d_hidden or cfg.d_mlp
        self.in_proj = nn.Linear(cfg.d_model, d_hidden, bias=cfg.bias)
        self.out_proj = nn.Linear(d_hidden, cfg.d_model, bias=cfg.bias)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[Tensor, "b p d"]) -> Float[Tensor, "b p d"]:
        return self.out_proj(self.hook_post(F.gelu(self.hook_pre(self.in_proj(x)))))


def tl_mlp_weights(take: Callable[..., Tensor]) -> dict[str, Tensor]:
    """An MLP's weights in TransformerLens's names and layout (W_in [d_model, d_mlp], b_in, W_out, b_out) before
    runtime_gain, which scales W_out and b_out: what both majors' exports show, as Mixer.tl_weights is the
    attention's. take(name, like=None) gives the MLP's tensor by name (zeros like `like` where it has none)."""
    w_in, w_out = take("in_proj.weight"), take("out_proj.weight")
    b_in, b_out = take("in_proj.bias", w_in[:, 0]), take("out_proj.bias", w_out[:, 0])
    return {"W_in": w_in.T, "b_in": b_in, "W_out": w_out.T, "b_out": b_out}
