"""The one entry point that picks the installed TransformerLens major's export of a checkpoint."""

from __future__ import annotations

from typing import Any

from interp.tl.major import TL_MAJOR


def load_tl(source: Any, **kwargs: Any) -> Any:
    """A ResidualGPT, Checkpoint or checkpoint path as TransformerLens's model for the installed major.

    A HookedTransformer (interp.to_hooked_transformer) on 3.x, a TransformerBridge
    (interp.to_transformer_bridge) on 4.x; keyword arguments go through (vocab, device, ...).
    """
    if TL_MAJOR >= 4:
        from interp.tl.bridge import to_transformer_bridge

        return to_transformer_bridge(source, **kwargs)
    from interp.tl.hooked import to_hooked_transformer

    return to_hooked_transformer(source, **kwargs)


__all__ = ["load_tl"]
