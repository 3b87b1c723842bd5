"""FLOPs for MFU: a training step's estimated FLOPs per token, and the machine's matmul peak.

MFU = flops_per_token * tokens/s / peak_matmul_flops. The trainer records it in final.json;
benchmarks.step measures the peak again at the end of its run (remeasure=True), because a
shared machine's peak drifts over minutes.
"""

from __future__ import annotations

import time

import torch

from interp.config.model_config import ModelConfig

_PEAK_FLOPS: dict[str, float] = {}  # "device:dtype" -> FLOP/s, measured once per process


def peak_matmul_flops(device: torch.device, dtype: torch.dtype = torch.float32, remeasure: bool = False) -> float:
    """FLOP/s of a large matmul on this device, measured once per process (the MFU denominator).

    remeasure=True measures again and keeps the new figure for later calls. The operands come
    from torch.randn, so a measurement draws from the global random state.
    """
    key = f"{device}:{dtype}"
    if remeasure or key not in _PEAK_FLOPS:
        n = 2048 if device.type == "cpu" else 8192
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        a @ b  # warm up
        reps = 3
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        _PEAK_FLOPS[key] = 2 * n**3 * reps / (time.perf_counter() - start)
    return _PEAK_FLOPS[key]


def flops_per_token(cfg: ModelConfig, n_params: int) -> float:
    """Training FLOPs per token: 6N for the matmuls (forward and backward) plus the attention scores."""
    # nanoGPT / PaLM estimate.
    return 6 * n_params + 12 * cfg.n_layers * cfg.d_model * cfg.n_ctx
