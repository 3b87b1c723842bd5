"""Can a run run? A memory estimate (and the probes' one need), checked before anything is allocated or written.

An absurd size (d_model=10**6, batch_size=10**8, eval_batches=10**9,
n_layers=10**7) used to end in an allocator traceback, sometimes after a
minute of work. The estimate is deliberately rough (fp32, AdamW, what a
backward pass keeps per token) and is only compared with the whole memory of
the device, so it refuses what cannot fit anywhere near, never a run that
might:

    parameters    weights + gradients + Adam's two moments      16 bytes each
    activations   per token: per layer ~12 d_model + 2 d_mlp + n_heads n_ctx floats kept for the
                  backward pass, and ~3 d_vocab for the logits and their gradient
    validation    the fixed batches, held for the whole run (x and y, int64)
"""

from __future__ import annotations

import os

from interp.config.memory import device_memory, gib, n_params  # the one estimate of a model's size; named here too
from interp.config.model_config import ModelConfig
from interp.errors import ConfigError


def estimate_bytes(cfg: ModelConfig, train) -> dict[str, int]:
    """The estimate, by part (see the module docstring)."""
    world = max(1, int(os.environ.get("WORLD_SIZE", "1")))
    tokens = (train.batch_size // world or 1) * cfg.n_ctx
    per_token = cfg.n_layers * (12 * cfg.d_model + 2 * cfg.d_mlp + cfg.n_heads * cfg.n_ctx) + 3 * cfg.d_vocab
    return {
        "parameters": 16 * n_params(cfg),
        "activations": 4 * tokens * per_token,
        "validation": 16 * train.eval_batches * train.batch_size * (cfg.n_ctx + 1),
    }


def check_fits(cfg: ModelConfig, train, device: str | None = None) -> dict[str, int]:
    """Refuse, with the estimate, a configuration that needs more than the device's whole memory."""
    parts = estimate_bytes(cfg, train)
    total, what = device_memory(device or train.device)
    need = sum(parts.values())
    if total is not None and need > total:
        detail = ", ".join(f"{k} {gib(v)}" for k, v in parts.items())
        raise ConfigError(
            f"this run needs about {gib(need)} ({detail}) but the machine has {gib(total)} of {what}; "
            "lower d_model, n_layers, n_ctx, batch_size or eval_batches"
        )
    return parts


def check_runnable(cfg: ModelConfig, train, device: str | None = None) -> dict[str, int]:
    """check_fits, and what the default probes need: alpha_tt is measured from position 1 on, so n_ctx >= 2
    (with n_ctx=1 every probe record would be NaN, which is never written)."""
    if train.probes and cfg.n_ctx < 2:
        raise ConfigError(f"the probes need n_ctx >= 2, got n_ctx={cfg.n_ctx}; raise n_ctx or set probes=false")
    return check_fits(cfg, train, device)
