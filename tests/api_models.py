"""What the tests/test_api_*.py files share: tiny models built directly (no training) and `refused`, which asserts
an error's type and that its message names the argument it is about."""

from __future__ import annotations

import pytest
import torch

from interp import ModelConfig, ResidualGPT

D_VOCAB = 10


def tiny_config(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=D_VOCAB), **changes})


def tiny_model(seed: int = 0, **changes) -> ResidualGPT:
    """A tiny ResidualGPT in eval mode, with a wide init so attention is far from uniform."""
    torch.manual_seed(seed)
    return ResidualGPT(tiny_config(init_std=0.2, **changes)).eval()


def ids(batch: int = 2, n: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, D_VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


def refused(error: type[BaseException], names: str, call, *args, **kwargs) -> BaseException:
    """call(*args, **kwargs) raises `error` whose message starts by naming `names` (the argument)."""
    with pytest.raises(error) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert message.startswith(names) or f" {names}" in message, message
    return caught.value
