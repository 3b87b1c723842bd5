"""The benchmark's shapes: a preset's model and training config, how long to time it, and its batches."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from interp.config.model_config import ModelConfig
from interp.errors import ToolkitError
from training.presets import parse_overrides, resolve

# (steps per round, rounds, warm-up steps) per shape; --steps / --rounds override.
SHAPE_DEFAULTS = {"smoke": (3, 2, 1), "cpu-quick": (2, 8, 2), "paper-10m": (1, 3, 1)}
DEFAULT_SHAPES = "cpu-quick,paper-10m"


class BenchError(ToolkitError):
    """The benchmark cannot run as asked (an unknown shape or variant, a failed child run)."""


@dataclass
class Shape:
    name: str
    model: ModelConfig
    batch_size: int
    grad_clip: float
    steps: int
    rounds: int
    warmup: int
    train: Any = field(repr=False, default=None)
    sets: list[str] = field(default_factory=list)  # the --set KEY=VALUE overrides, passed on to child runs

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.n_ctx

    def describe(self) -> str:
        m = self.model
        return (
            f"{m.n_layers}L d{m.d_model} h{m.n_heads} ctx{m.n_ctx} batch{self.batch_size} vocab{m.d_vocab} "
            f"dropout{m.dropout:g}"
        )


def make_shape(name: str, steps: int | None, rounds: int | None, sets: list[str] | None = None) -> Shape:
    if name not in SHAPE_DEFAULTS:
        raise BenchError(f"unknown shape {name!r}; shapes: {', '.join(SHAPE_DEFAULTS)}")
    spec = resolve(name, parse_overrides(sets or []))
    d_steps, d_rounds, warmup = SHAPE_DEFAULTS[name]
    return Shape(
        name,
        spec.model,
        spec.train.batch_size,
        spec.train.grad_clip or math.inf,
        steps or d_steps,
        rounds or d_rounds,
        warmup,
        spec.train,
        list(sets or []),
    )


def fixed_token_batches(shape: Shape, n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    size = (shape.batch_size, shape.model.n_ctx + 1)
    windows = [torch.randint(0, shape.model.d_vocab, size, generator=gen) for _ in range(n)]
    return [(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in windows]
