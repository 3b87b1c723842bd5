"""Seeded batch sampling and the fixed validation batches.

Batches are drawn nanoGPT-style (uniform random window offsets) from a generator the sampler owns, so a run
is reproducible from (seed, draws) and its state rides along in the checkpoint. Validation uses the same
batches for every config, seed and evaluation (docs/DESIGN.md contract 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import DataError

VAL_SEED = 99991

Batch = tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]


def check_positive(**values: Any) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise DataError(f"{name} must be a positive integer, got {value!r}")


def _check_data(data: np.ndarray, n_ctx: int) -> np.ndarray:
    data = data if isinstance(data, np.ndarray) else np.asarray(data)  # keep memmaps as memmaps
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.integer):
        raise DataError(f"token data must be a 1-D integer array, got {data.ndim}-D {data.dtype}")
    if len(data) <= n_ctx + 1:
        raise DataError(f"n_ctx {n_ctx} is longer than the data ({len(data)} tokens)")
    return data


def _draw_offsets(n_tokens: int, n_ctx: int, batch_size: int, generator: torch.Generator) -> Tensor:
    # nanoGPT: randint(len(data) - block_size): the last window's target ends exactly at the last token
    return torch.randint(n_tokens - n_ctx, (batch_size,), generator=generator)


def _gather(data: np.ndarray, offsets: Sequence[int], n_ctx: int) -> Batch:
    windows = np.stack([np.asarray(data[i : i + n_ctx + 1], dtype=np.int64) for i in offsets])
    x = torch.from_numpy(np.ascontiguousarray(windows[:, :-1]))
    y = torch.from_numpy(np.ascontiguousarray(windows[:, 1:]))
    return x, y


class BatchSampler:
    """Random training windows from a generator it owns; every DDP rank draws the same global batch.

    Each call draws all batch_size offsets and returns rank's contiguous slice of them, so W ranks together
    see exactly the batch one process would, and all ranks' generators stay in step.
    """

    def __init__(self, data: np.ndarray, n_ctx: int, batch_size: int, seed: int):
        check_positive(n_ctx=n_ctx, batch_size=batch_size)
        self.data = _check_data(data, n_ctx)
        self.n_ctx = n_ctx
        self.batch_size = batch_size
        self.seed = seed
        self.draws = 0
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self, rank: int = 0, world_size: int = 1) -> Batch:
        """(x, y) int64 [batch_size / world_size, n_ctx]; y is x shifted by one token."""
        check_positive(world_size=world_size)
        if not 0 <= rank < world_size:
            raise DataError(f"rank must be in [0, {world_size}), got {rank}")
        if self.batch_size % world_size:
            raise DataError(f"batch_size {self.batch_size} is not divisible by world_size {world_size}")
        offsets = _draw_offsets(len(self.data), self.n_ctx, self.batch_size, self.generator)
        self.draws += 1
        per_rank = self.batch_size // world_size
        return _gather(self.data, offsets[rank * per_rank : (rank + 1) * per_rank].tolist(), self.n_ctx)

    def state_dict(self) -> dict[str, Any]:
        """Plain data (a uint8 tensor and ints): safe for weights_only checkpoints."""
        return {"generator": self.generator.get_state(), "seed": self.seed, "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if missing := {"generator", "seed", "draws"} - set(state):
            raise DataError(f"sampler state lacks {sorted(missing)}")
        generator = state["generator"]
        if not isinstance(generator, Tensor) or generator.dtype != torch.uint8:
            raise DataError("sampler state 'generator' must be a uint8 tensor from Generator.get_state()")
        try:
            self.generator.set_state(generator.clone().cpu())
        except RuntimeError as e:
            raise DataError(f"sampler state 'generator' is not a CPU generator state ({e})") from None
        self.seed, self.draws = int(state["seed"]), int(state["draws"])


def random_batches(
    data: np.ndarray, n_ctx: int, batch_size: int, n_batches: int, generator: torch.Generator
) -> list[Batch]:
    """n_batches random batches from the caller's generator (for measuring evaluation noise)."""
    check_positive(n_ctx=n_ctx, batch_size=batch_size, n_batches=n_batches)
    data = _check_data(data, n_ctx)
    return [
        _gather(data, _draw_offsets(len(data), n_ctx, batch_size, generator).tolist(), n_ctx) for _ in range(n_batches)
    ]


def fixed_batches(data: np.ndarray, n_ctx: int, batch_size: int, n_batches: int, seed: int = VAL_SEED) -> list[Batch]:
    """The fixed validation batches: drawn once from a fresh generator seeded 99991 (docs/DESIGN.md contract 6)."""
    return random_batches(data, n_ctx, batch_size, n_batches, torch.Generator().manual_seed(seed))
