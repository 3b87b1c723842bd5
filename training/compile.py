"""torch.compile as an opt-in (TrainConfig.compile, `--set compile=true`; compile_mode picks torch's mode).

compile_mode="reduce-overhead" captures the compiled step in CUDA graphs (torch's cudagraph trees), which
takes kernel launches and Python off a small model's step on a GPU. Evaluation runs the same module in eval
mode, which torch compiles (and captures) as a graph of its own; hooks added for probes make torch trace
again with them. On a device without CUDA there is no graph to capture: maybe_compile says so in one line
and compiles without graphs.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the modes whose compiled step torch captures in CUDA graphs


def uses_cuda_graphs(mode: str, device: torch.device) -> bool:
    return mode in GRAPH_MODES and device.type == "cuda"


def describe_compile(enabled: bool, mode: str, device: torch.device) -> str | bool:
    """What ran, for final.json: False, or torch.compile's mode and whether CUDA graphs captured it."""
    if not enabled:
        return False
    return f"{mode} (CUDA graphs)" if uses_cuda_graphs(mode, device) else mode


_said: set[str] = set()


def maybe_compile(model: nn.Module, enabled: bool, mode: str = "default", device: torch.device | None = None):
    """Compile `model` in place when enabled; returns the same object either way.

    nn.Module.compile() compiles the module's call without wrapping it, so
    state_dict keys (checkpoints), attribute access, hooks and run_with_cache
    stay those of the eager model. Compilation happens on the first forward.
    """
    if not enabled:
        return model
    if mode in GRAPH_MODES and device is not None and device.type != "cuda":
        notice = f"compile_mode={mode}: CUDA graphs need a CUDA device; on {device.type} torch.compile runs without"
        if notice not in _said:  # an ensemble compiles K members and the stacked model: said once
            _said.add(notice)
            print(notice, file=sys.stderr)
    model.compile(mode=None if mode == "default" else mode)
    return model


def mark_step(mode: str, device: torch.device) -> None:
    """Tell cudagraph trees a new training iteration begins (its outputs of the last one may be overwritten)."""
    if uses_cuda_graphs(mode, device):
        torch.compiler.cudagraph_mark_step_begin()
