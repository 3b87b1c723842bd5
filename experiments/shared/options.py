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


COMMANDS = tuple(
    "routing_test interventions phase_diagram escape_time residual_sweep gain_confound eval_noise floor".split()
)
