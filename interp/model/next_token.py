"""The next token from a model's last logits: greedy, or drawn at a temperature among the top k.

ResidualGPT.generate draws with next_token; python -m interp.sample checks --temperature with temperature_option
before it reads the checkpoint. A temperature is a finite number >= 0, 0 greedy. Any positive one gives text:
the logits are scaled after their maximum is taken off, in float64, so a temperature whose division would
overflow float32 logits (1e-300, where the plain division made inf and the softmax NaN) leaves the best token
at 0 and the rest at -inf, and draws it, as greedy does; a huge one draws evenly among the tokens kept.
"""

from __future__ import annotations

import argparse
import math
import numbers
from typing import TYPE_CHECKING, Any

from interp.errors import ConfigError

if TYPE_CHECKING:  # light: python -m interp.sample checks --temperature before torch is imported
    import inspect

    import torch
    from jaxtyping import Float, Int
    from torch import Tensor

RULE = "a finite number >= 0 (0 is greedy)"


def check_temperature(temperature: Any, name: str = "temperature") -> float:
    """temperature as a float, or a ConfigError naming `name` and the rule: NaN, inf, negatives, non-numbers."""
    if type(temperature).__name__ == "Tensor" and getattr(temperature, "ndim", None) == 0:
        temperature = temperature.item()  # a 0-d tensor, as torch code passes numbers around
    real = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
    try:
        value = float(temperature) if real else math.nan
    except OverflowError:  # an int past float's range (2**2000): too large to be finite
        value = math.inf
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be {RULE}, got {temperature!r:.80}")
    return value


# Below this, TransformerLens's sampler (logits / temperature in float32, then softmax) can overflow to inf and
# NaN: the exports pass 0 instead, TL's greedy, which is what the limit T -> 0 draws (ties aside).
TL_GREEDY_BELOW = 1e-30


def tl_temperature(bound: inspect.BoundArguments) -> bool:
    """A TransformerLens generate call's bound arguments on an export, its temperature (where given) checked as
    check_temperature does and a tiny one 0; whether one was given."""
    if "temperature" not in bound.arguments:
        return False
    value = check_temperature(bound.arguments["temperature"])
    bound.arguments["temperature"] = 0.0 if value < TL_GREEDY_BELOW else value
    return True


def temperature_option(text: str) -> float:
    """An argparse type for --temperature: the command refuses a bad one before it reads a checkpoint."""
    try:
        return check_temperature(float(text), "--temperature")
    except ValueError:  # float()'s, and ConfigError (a ValueError) with its message
        raise argparse.ArgumentTypeError(f"--temperature must be {RULE}, got {text!r}") from None


def next_token(
    logits: Float[Tensor, "batch vocab"],
    temperature: float,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Int[Tensor, "batch 1"]:
    """The argmax at temperature 0; else a draw from softmax(logits / temperature) over the top_k logits.

    logits must be finite (generate refuses others first). Ties at the top are drawn evenly at a tiny temperature.
    """
    import torch

    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    # The best logit scaled is 0, every other <= 0: no temperature can make an inf, and -inf is a probability of 0.
    shifted = logits.double() - logits.max(-1, keepdim=True).values.double()
    scaled = (shifted / temperature).to(logits.dtype)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)
