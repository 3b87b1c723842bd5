"""Which TransformerLens major is installed, and the one entry point that picks the matching export.

    TL 3.x   interp.to_hooked_transformer -> HookedTransformer (interp.hooked)
    TL 4.x   interp.to_transformer_bridge -> TransformerBridge (interp.bridge)

load_tl(checkpoint) returns whichever the installed major has. TL 4 removed
HookedTransformer; interp.hooked calls require_tl3() before it imports it, so on
4.x `import interp.hooked` (and interp.to_hooked_transformer, save_hooked,
load_hooked) is a ToolkitError that names to_transformer_bridge, instead of TL's
ImportError deep inside an import.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from interp.errors import ToolkitError

TL_VERSION = version("transformer-lens")
TL_MAJOR = int(TL_VERSION.split(".")[0])


class NeedsTransformerLens3(ToolkitError, ImportError):
    """A TransformerLens 3.x-only path (HookedTransformer) asked for under TransformerLens 4."""


def require_tl3() -> None:
    """Raise NeedsTransformerLens3 unless TransformerLens 3.x (which has HookedTransformer) is installed."""
    if TL_MAJOR >= 4:
        raise NeedsTransformerLens3(
            f"to_hooked_transformer / save_hooked / load_hooked (interp.hooked) need TransformerLens 3.x "
            f"(HookedTransformer), but transformer-lens {TL_VERSION} is installed, which removed it: use "
            "interp.to_transformer_bridge (or interp.load_tl, which picks the installed major), or install "
            "'transformer-lens>=3.9,<4'"
        )


def load_tl(source: Any, **kwargs: Any) -> Any:
    """A ResidualGPT, Checkpoint or checkpoint path as TransformerLens's model for the installed major.

    A HookedTransformer (interp.to_hooked_transformer) on 3.x, a TransformerBridge
    (interp.to_transformer_bridge) on 4.x; keyword arguments go through (vocab, device, ...).
    """
    if TL_MAJOR >= 4:
        from interp.bridge import to_transformer_bridge

        return to_transformer_bridge(source, **kwargs)
    from interp.hooked import to_hooked_transformer

    return to_hooked_transformer(source, **kwargs)


__all__ = ["TL_MAJOR", "TL_VERSION", "NeedsTransformerLens3", "load_tl", "require_tl3"]
