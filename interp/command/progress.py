"""Progress bars: one tqdm bar drawn the same way by every command (a run's steps, an experiment's passes)."""

from __future__ import annotations

from typing import Any


def progress_bar(total: int, desc: str, unit: str, *, on: bool, leave: bool = False, **more: Any) -> Any:
    """A tqdm bar of `total` `unit`s named `desc`, drawn only when `on`, as wide as the terminal; gone when done
    unless `leave`. `more` goes to tqdm as it is (initial=...). tqdm is imported here, when a bar is made."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not on, leave=leave, dynamic_ncols=True, **more)
