"""How much memory a model of a ModelConfig takes, and the memory a device has: the one estimate.

training.budget adds what training needs on top (gradients, Adam, activations, validation
batches); a reader of a checkpoint or a saved export (interp.files.checks) compares what the
file's config would allocate with the device before any tensor is made, so a file forged
to 100,000 layers or a 2**31 vocabulary is refused with the estimate, not by the allocator.
"""

from __future__ import annotations

import os

from interp.config.model_config import ModelConfig


def n_params(cfg: ModelConfig) -> int:
    """ResidualGPT's parameter count, from the config alone (LayerNorm and bias terms included roughly)."""
    d, f, v = cfg.d_model, cfg.d_mlp, cfg.d_vocab
    per_layer = 4 * d * d + 2 * d * f + 9 * d + f
    return v * d + cfg.n_ctx * d + cfg.n_layers * per_layer + 2 * d + (0 if cfg.tie_embeddings else d * v)


def device_here(name: str):
    """torch.device(name) when this machine has it; else ConfigError saying what it lacks (one home for the
    check training's --set device=... and load_hooked's saved device both need)."""
    import torch

    from interp.errors import ConfigError

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device {name!r:.60} is not a device name (cpu, cuda, cuda:0, mps)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} asked for, but this machine has no CUDA device; use cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {name!r} asked for, but this machine has {torch.cuda.device_count()} CUDA devices"
            )
    elif device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError(f"device {name!r} asked for, but MPS is not available here; use cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {name!r} is not one this toolkit runs on (cpu, cuda, mps)")
    return device


def device_memory(device: str) -> tuple[int | None, str]:
    """(bytes, what) of the memory a run on this device can use at most; None where it cannot be told."""
    if device.startswith("cuda") or device == "auto":
        try:
            import torch

            if torch.cuda.is_available():
                index = int(device.split(":")[1]) if ":" in device else 0
                return torch.cuda.get_device_properties(index).total_memory, "GPU memory"
        except Exception:  # noqa: BLE001 - no CUDA here: fall back to the host's memory
            pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "memory"
    except (ValueError, OSError, AttributeError):
        return None, "memory"


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**50 else f"{n / 2**30:.2e} GiB"


def model_bytes(cfg: ModelConfig) -> int:
    """What loading a model of cfg allocates, roughly: its fp32 weights twice (the file's copy and the model's)."""
    return 8 * n_params(cfg)


__all__ = ["device_memory", "gib", "model_bytes", "n_params"]
