"""The old path of interp.tl.bridge (TransformerLens 4.x bridge), kept for notebooks that import it."""

from interp.tl.bridge import (
    BRIDGE_SCHEMA,
    BridgeActivationCache,
    ResidualBridge,
    bridge_config,
    load_bridge,
    save_bridge,
    to_transformer_bridge,
)

__all__ = [
    "BRIDGE_SCHEMA",
    "BridgeActivationCache",
    "ResidualBridge",
    "bridge_config",
    "load_bridge",
    "save_bridge",
    "to_transformer_bridge",
]
