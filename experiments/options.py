"""Command-line option checks shared by the runner, the launcher and the experiments."""

from __future__ import annotations

import math

from interp.errors import ToolkitError


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    if text is None:
        return default
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ToolkitError(f"--seeds expects comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ToolkitError(f"--seeds needs distinct non-negative integers, got {text!r}")
    return seeds


def check_number(name: str, value: float, minimum: float = 0.0, inclusive: bool = True) -> None:
    """A finite number >= minimum (> minimum when not inclusive), or one `error:` line naming the option."""
    ok = math.isfinite(value) and (value >= minimum if inclusive else value > minimum)
    if not ok:
        relation = ">=" if inclusive else ">"
        raise ToolkitError(f"{name} must be a finite number {relation} {minimum:g}, got {value}")
