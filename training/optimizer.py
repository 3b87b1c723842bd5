"""The optimizer every run uses and its learning-rate schedule (the stacked ensemble mirrors both).

AdamW with weight decay on matrices and embeddings only, as in the paper; lr_at is linear warm-up then
cosine to min_lr, or a constant lr from the first step (lr_schedule="constant" has no warm-up).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from training.presets import TrainConfig


def optimizer_groups(params, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay only on matrices and embeddings (tensors with >= 2 dims), as in the paper."""
    params = [p for p in params if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    groups = optimizer_groups(model.parameters(), cfg.weight_decay)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=device.type == "cuda")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine from lr to min_lr at max_steps (or constant)."""
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)
