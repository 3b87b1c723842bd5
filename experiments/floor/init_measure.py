"""Token uniformity at initialisation: the model a run starts from, measured before it trains.

init_model builds exactly what training.trainer.Trainer builds at step 0 (torch.manual_seed(seed), then
ResidualGPT(cfg), then model_init), so a run's step-0 uniformity probe and init_uniformity agree (a test
holds them equal). The measure that predicts is u = -log(residual) at the last block's resid_post (0: no
collapse; larger: positions more alike), on the trainer's first fixed validation batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from interp.config.model_config import ModelConfig
from interp.model.gpt import ResidualGPT
from probes.uniformity import token_uniformity
from training.batches import fixed_batches

INIT_BATCHES = 2  # the probes' PROBE_BATCHES: the same batches the live probe reads


def init_model(cfg: ModelConfig, seed: int, model_init: Callable | None = None) -> ResidualGPT:
    torch.manual_seed(seed)
    model = ResidualGPT(cfg)
    if model_init is not None:
        model_init(model)
    return model.eval()


def probe_batches(val, n_ctx: int, batch_size: int, n: int = INIT_BATCHES) -> list:
    """The trainer's first n fixed validation batches (training.batches.fixed_batches)."""
    return fixed_batches(val, n_ctx, batch_size, n)


def collapse(residual: float) -> float:
    """u = -log(residual): 0 where the stream keeps its diversity, growing as the positions become alike."""
    return -math.log(max(residual, 1e-300))


def init_uniformity(cfg: ModelConfig, seed: int, batches, model_init: Callable | None = None) -> dict:
    out = token_uniformity(init_model(cfg, seed, model_init), batches)
    out["u"] = collapse(out["residual"][-1])
    return out
