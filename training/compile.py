"""torch.compile as an opt-in (TrainConfig.compile, `--set compile=true`)."""

from __future__ import annotations

from torch import nn


def maybe_compile(model: nn.Module, enabled: bool) -> nn.Module:
    """Compile `model` in place when enabled; returns the same object either way.

    nn.Module.compile() compiles the module's call without wrapping it, so
    state_dict keys (checkpoints), attribute access, hooks and run_with_cache
    stay those of the eager model. Compilation happens on the first forward.
    """
    if enabled:
        model.compile()
    return model
