"""Per-layer gradient flow: parameter-gradient norms and dLoss/d(resid) along the stream.

Parameter groups: each block's attention (`blocks.{l}.attn.*`) and MLP
(`blocks.{l}.mlp.*`) separately, the embeddings (token and position; the tied
unembedding is the token embedding) and the total over every parameter. Read
after backward and before clipping.

Residual gradients: the Frobenius norm of dLoss/d(resid) at every
blocks.{l}.hook_resid_pre and at the final residual (the last block's
hook_resid_post) - the gradient highway, or its absence, seen directly.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interp.model.api import check_materialised, check_pair, check_targets
from interp.model.eval_mode import unfrozen_in_eval
from interp.model.gpt import train_mode_hooks_expected


def parameter_grad_norms(model: nn.Module) -> dict:
    """L2 norms of the current .grad, grouped; a parameter without a grad counts as zero."""
    squares = {
        name: p.grad.detach().double().pow(2).sum().item() for name, p in model.named_parameters() if p.grad is not None
    }
    return grouped_norms(model.cfg.n_layers, squares)


def grouped_norms(n_layers: int, squares: dict[str, float]) -> dict:
    """{attn, mlp (per layer), embed, total} from each parameter's squared gradient norm, by parameter name
    (what parameter_grad_norms reads off a model, and training.steps off one member's stacked gradients)."""
    groups = {"embed": 0.0, "total": 0.0}
    groups.update({f"blocks.{l}.{part}": 0.0 for l in range(n_layers) for part in ("attn", "mlp")})
    for name, sq in squares.items():
        groups["total"] += sq
        if name.startswith(("embed.", "pos_embed.")):
            groups["embed"] += sq
        elif name.startswith("blocks."):
            layer, part = name.split(".")[1:3]
            if part in ("attn", "mlp"):
                groups[f"blocks.{layer}.{part}"] += sq
    norms = {k: math.sqrt(v) for k, v in groups.items()}
    per_layer = {part: [norms[f"blocks.{l}.{part}"] for l in range(n_layers)] for part in ("attn", "mlp")}
    return {**per_layer, "embed": norms["embed"], "total": norms["total"]}


def resid_grad_sites(n_layers: int) -> list[str]:
    return [f"blocks.{l}.hook_resid_pre" for l in range(n_layers)] + [f"blocks.{n_layers - 1}.hook_resid_post"]


@contextmanager
def capture_resid_grads(model: nn.Module):
    """Within the block, every forward records the norm of dLoss/d(resid) at each site on backward.

    Yields a dict site -> norm (the last backward's). Hooks are removed on exit, even on error.
    """
    sites = resid_grad_sites(model.cfg.n_layers)
    grads: dict[str, float] = {}

    def attach(resid: Tensor, hook):
        if resid.requires_grad:
            name = hook.name
            resid.register_hook(lambda g: grads.__setitem__(name, g.detach().double().norm().item()))

    with train_mode_hooks_expected(), model.hooks(fwd_hooks=[(lambda name: name in sites, attach)]):
        yield grads


def gradient_flow(model: nn.Module, x: Tensor, y: Tensor) -> dict:
    """One forward/backward on (x, y) in eval mode; parameter and residual gradient norms.

    Existing .grad values are saved and restored, so this is safe mid-training. The loss is the model's own
    (cross-entropy, -1 targets masked), computed from the logits, so an export (interp.to_hooked_transformer)
    is read as well as a ResidualGPT.
    """
    check_pair(x, y)
    check_materialised(model, "model")
    saved = {n: p.grad for n, p in model.named_parameters()}
    with unfrozen_in_eval(model, model.parameters()):  # frozen parameters measured too, then frozen again
        try:
            model.zero_grad(set_to_none=True)
            with torch.enable_grad(), capture_resid_grads(model) as grads:
                device = next(model.parameters()).device
                logits, y = model(x.to(device)), y.to(device)
                check_targets(y, logits.shape[-1], "y")
                # ResidualGPT.forward's loss, op for op (a HookedTransformer reads a second argument as return_type)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=-1)
                loss.backward()
            out = parameter_grad_norms(model)
            out["resid"] = [grads.get(s, 0.0) for s in resid_grad_sites(model.cfg.n_layers)]
            out["loss"] = loss.item()
            return out
        finally:
            for n, p in model.named_parameters():
                p.grad = saved[n]
