"""What the benchmark times: the training step, and the models it is timed on (StepVariant).

The reference (benchmarks/reference.py) and ResidualGPT in its residual configs and mixers, plus
ResidualGPT with one of its costs put back or taken away (the explicit mask, unfused LayerNorm, the
explicit softmax path, no hook points, the trainer's deterministic mode, torch.compile).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from benchmarks.reference import RefGPT
from interp.config.model_config import ModelConfig
from interp.config.registry import mixer_names
from interp.model.gpt import ResidualGPT
from training.compile import maybe_compile

RESIDUAL_CONFIGS = ("full", "attn_only", "ffn_only", "none")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x, y, clip: float) -> torch.Tensor:
    """One step as the trainer takes it: forward, backward, clip, AdamW, zero_grad."""
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@contextlib.contextmanager
def deterministic_mode(fill_uninitialized_memory: bool = True):
    """The trainer's default (deterministic=True): torch.use_deterministic_algorithms(True)."""
    import torch.utils.deterministic as det

    prev, prev_fill = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    det.fill_uninitialized_memory = fill_uninitialized_memory
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev)
        det.fill_uninitialized_memory = prev_fill


class _NoHook:
    """Stands in for a HookPoint: a plain call, no nn.Module machinery, never hooked."""

    fwd_hooks = bwd_hooks = _forward_hooks = ()  # what interp.model.mixers._hooked reads

    def __call__(self, x):
        return x


def strip_hooks(model: nn.Module) -> nn.Module:
    """Replace every HookPoint by a plain identity call: what unused hook points cost, removed."""
    from transformer_lens.hook_points import HookPoint

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, HookPoint):
                delattr(module, name)
                object.__setattr__(module, name, _NoHook())
    return model


def _no_causal_kernel(model: ResidualGPT) -> ResidualGPT:
    for block in model.blocks:
        if hasattr(block.attn, "causal_kernel"):
            block.attn.causal_kernel = False
    return model


def _unfused_layer_norm(model: ResidualGPT) -> ResidualGPT:
    """A permanent identity hook on every hook_normalized: LayerNorm takes its hooked (split) path."""
    for name in model.hook_dict:
        if name.endswith("hook_normalized"):
            model.add_hook(name, lambda x, hook: x, is_permanent=True)
    return model


def _explicit(model: ResidualGPT) -> ResidualGPT:
    model.set_explicit_attention(True)
    return model


@dataclass
class StepVariant:
    """A model to time the training step on (not an experiment's Variant): a name, how to build it from a
    shape's ModelConfig, a context its steps run in, and a note for the report."""

    name: str
    build: Callable[[ModelConfig], nn.Module]
    context: Callable[[], Any] = contextlib.nullcontext
    note: str = ""


def variants_for(compile_: bool) -> list[StepVariant]:
    """Every model the benchmark can time, the reference first; torch.compile's only when asked."""
    vs = [StepVariant("reference", RefGPT, note="nanoGPT-structured GPT, is_causal SDPA, no hooks")]
    vs += [
        StepVariant(r, lambda c, r=r: ResidualGPT(c.replace(residual=r)), note="attention mixer")
        for r in RESIDUAL_CONFIGS
    ]
    vs += [
        StepVariant(f"full+{m}", lambda c, m=m: ResidualGPT(c.replace(mixer=m)), note=f"{m} mixer")
        for m in mixer_names()
        if m != "attention"  # every routing control the registry knows
    ]
    vs += [
        StepVariant(
            "full/masked", lambda c: _no_causal_kernel(ResidualGPT(c)), note="explicit mask (before is_causal)"
        ),
        StepVariant(
            "full/ln_split",
            lambda c: _unfused_layer_norm(ResidualGPT(c)),
            note="LayerNorm then a separate * w (before fusing)",
        ),
        StepVariant("full/explicit", lambda c: _explicit(ResidualGPT(c)), note="explicit softmax path"),
        StepVariant("full/no_hooks", lambda c: strip_hooks(ResidualGPT(c)), note="hook points stripped"),
        StepVariant("full/deterministic", ResidualGPT, deterministic_mode, note="the trainer's deterministic mode"),
        StepVariant(
            "full/deterministic_nofill",
            ResidualGPT,
            lambda: deterministic_mode(False),
            note="... without filling uninitialized memory",
        ),
    ]
    if compile_:
        vs.append(StepVariant("full/compiled", lambda c: maybe_compile(ResidualGPT(c), True), note="torch.compile"))
    return vs
