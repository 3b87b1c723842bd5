"""The numerics a run trains with, per device: which device, which dtype ("auto" made concrete), autocast,
determinism and TF32 (set for a run, restored after it), and the record of what ran for final.json.

Defaults (issue 49, measured on one H200 at paper-10m: docs/results/ensembles.md): dtype "auto" is bfloat16
autocast on CUDA and float32 on a CPU; float32 matmuls on CUDA use TF32 (tf32=true); deterministic
algorithms stay on (deterministic=true) although they cost 17% of the bf16 step there (17.9 ms against
15.3), because contract 5 (same seed, same bits; a resume ends bitwise equal) rests on them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import torch

from interp.config.memory import device_here
from interp.errors import ConfigError
from training.compile import describe_compile
from training.presets import TrainConfig, concrete_dtype


def pick_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return device_here(name)


def device_type(name: str) -> str | None:
    """The type of device `name` picks here (pick_device's rule), or None where it names no device."""
    if name == "auto":
        return pick_device(name).type
    try:
        return torch.device(name).type
    except (RuntimeError, TypeError, ValueError):
        return None


def resolve_dtype(cfg: TrainConfig) -> TrainConfig:
    """cfg with dtype "auto" made concrete for the device it trains on (training.presets.concrete_dtype), so
    config.json, the checkpoint and the run's identity hold what ran: a CPU run (float32) and a GPU run
    (bfloat16) of one preset are different runs, and reusing one for the other is refused naming train.dtype."""
    if cfg.dtype != "auto":
        return cfg
    kind = device_type(cfg.device)
    return cfg if kind is None else dataclasses.replace(cfg, dtype=concrete_dtype("auto", kind))


def autocast_context(dtype: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast where asked for (on CUDA, or a CPU's own autocast); float32 otherwise."""
    dtype = concrete_dtype(dtype, device.type)
    if dtype != "bfloat16":
        return contextlib.nullcontext()
    if device.type not in ("cuda", "cpu"):
        raise ConfigError(f"dtype=bfloat16 autocast is not supported on {device.type} here; use dtype=float32")
    return torch.autocast(device.type, dtype=torch.bfloat16)


@contextlib.contextmanager
def process_settings():
    """Leave a notebook's process as it was: determinism and the TF32 flags a run sets (apply_settings)."""
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous[1:]


def apply_settings(cfg: TrainConfig, device: torch.device) -> None:
    """Determinism (the default: contract 5) and, on CUDA, TF32 for float32 matmuls (cfg.tf32)."""
    if cfg.deterministic and device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # both ways: a process that already has them on (a notebook, an earlier run) must not run a
    # deterministic=false run deterministically while final.json says otherwise
    torch.use_deterministic_algorithms(cfg.deterministic)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.tf32


def what_ran(cfg: TrainConfig, device: torch.device) -> dict[str, Any]:
    """The numerics a run trained with, for final.json (config.json holds what was asked, dtype made concrete)."""
    dtype = concrete_dtype(cfg.dtype, device.type)
    return {
        "dtype": "bfloat16 autocast" if dtype == "bfloat16" else "float32",
        "float32_matmul": "tf32" if device.type == "cuda" and cfg.tf32 else "float32",
        "deterministic": cfg.deterministic,
        "compile": describe_compile(cfg.compile, cfg.compile_mode, device),
    }
