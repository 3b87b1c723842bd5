"""Command-line option checks shared by the runner, the launcher and the experiments."""

from __future__ import annotations

import math

from interp.command.cli import seed_list
from interp.errors import ToolkitError


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    return default if text is None else seed_list(text)


def check_number(name: str, value: float, minimum: float = 0.0, inclusive: bool = True) -> None:
    """A finite number >= minimum (> minimum when not inclusive), or one `error:` line naming the option."""
    ok = math.isfinite(value) and (value >= minimum if inclusive else value > minimum)
    if not ok:
        relation = ">=" if inclusive else ">"
        raise ToolkitError(f"{name} must be a finite number {relation} {minimum:g}, got {value}")


def comma_list(text: str, name: str, noun: str = "value", refuse: dict[float, str] | None = None) -> tuple[float, ...]:
    """An option's comma-separated numbers, each finite and > 0 (check_number) and none twice, or one `error:` line
    naming the option; `refuse` maps a value the option may not take to its own message (checked value by value)."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ToolkitError(f"{name} expects comma-separated numbers, got {text!r}") from None
    for v in values:
        check_number(name, v, 0.0, inclusive=False)
        if refuse and v in refuse:
            raise ToolkitError(refuse[v])
    if len(set(values)) != len(values):
        raise ToolkitError(f"{name} {text!r} names a {noun} twice")
    return values


COMMANDS = tuple(
    "routing_test interventions phase_diagram escape_time residual_sweep gain_confound eval_noise floor".split()
)
