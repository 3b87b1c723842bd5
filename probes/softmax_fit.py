"""The identity probes' decoders: one softmax regression per offset on a site's standardised activations.

fit_site standardises a site's activations (train-split mean and std) and fits, by full-batch L-BFGS from zero,
one decoder per offset along the weight-decay grid from strong to weak (each fit from the previous solution),
keeping per offset the fit with the lowest held-out cross-entropy. probes.identity measures with it, and
probes.decoders fits it once on a clean model to read intervened activations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor


def _fit(
    x_fit: Float[Tensor, "n d"],
    y_fit: Int[Tensor, "n offset"],
    x_held: Float[Tensor, "m d"],
    y_held: Int[Tensor, "m offset"],
    n_classes: int,
    weight_decays: Sequence[float],
    max_iter: int,
) -> tuple[Tensor, Tensor, list[float]]:
    """One softmax decoder per offset, decay chosen per offset on the held-out rows.

    The offsets are fitted jointly (one matmul; the problems are independent, so
    the joint optimum is each one's optimum); the loss is the mean cross-entropy
    per offset plus decay/2 |W|^2, its gradient written out (no autograd: a
    third of the time). Returns W [offset, d, class], b [offset, class], decays.
    """
    n_off, d = y_fit.shape[1], x_fit.shape[1]
    x1 = torch.cat([x_fit, torch.ones(len(x_fit), 1)], 1)
    x1_t = x1.T.contiguous()
    valid = y_fit >= 0
    index = y_fit.clamp_min(0)[..., None]
    row_weight = (valid.float() / valid.sum(0).clamp_min(1))[..., None]  # mean per offset; 0 where invalid
    theta = torch.zeros(d + 1, n_off * n_classes)  # last row: the biases
    best: list[tuple[float, Tensor | None, float]] = [(math.inf, None, 0.0)] * n_off
    for decay in weight_decays:  # strong to weak, each fit starting from the last

        def closure(decay=decay):
            log_p = torch.log_softmax((x1 @ theta).view(len(x1), n_off, n_classes), -1)
            loss = -(log_p.gather(-1, index) * row_weight).sum() + 0.5 * decay * theta[:-1].pow(2).sum()
            g = log_p.exp_().scatter_add_(-1, index, torch.full_like(row_weight, -1.0)).mul_(row_weight)
            grad = x1_t @ g.view(len(x1), -1)
            grad[:-1] += decay * theta[:-1]
            theta.grad = grad
            return loss

        opt = torch.optim.LBFGS(
            [theta],
            lr=1.0,
            max_iter=max_iter,
            history_size=10,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-6,
            tolerance_change=1e-9,
        )
        opt.step(closure)
        logits = (x_held @ theta[:-1] + theta[-1]).view(len(x_held), n_off, n_classes)
        for k in range(n_off):
            held = float(F.cross_entropy(logits[:, k], y_held[:, k], ignore_index=-100))
            if best[k][1] is None or held < best[k][0]:  # a NaN held-out loss keeps the first fit, not None
                best[k] = (held, theta.view(d + 1, n_off, n_classes)[:, k].clone(), decay)
    w = torch.stack([t[:-1] for _, t, _ in best])
    b = torch.stack([t[-1] for _, t, _ in best])
    return w, b, [decay for *_, decay in best]


def fit_site(
    fit_acts: Tensor, held_acts: Tensor, y_fit: Tensor, y_held: Tensor, n_classes: int, weight_decays, max_iter: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, float]:
    """One site's decoder on standardised activations: (mean, std, W, b, the weight decay chosen on held)."""
    mean, std = fit_acts.mean(0), fit_acts.std(0)
    std = torch.where(std > 1e-6 * max(float(std.max()), 1e-30), std, torch.ones_like(std))  # constant features
    w, b, decay = _fit(
        (fit_acts - mean) / std, y_fit, (held_acts - mean) / std, y_held, n_classes, weight_decays, max_iter
    )
    return mean, std, w, b, decay
