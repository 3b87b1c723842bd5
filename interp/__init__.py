"""The residual-ablation GPT and what reads it."""

from interp.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from interp.config import ModelConfig
from interp.errors import CheckpointError, ConfigError, DataError, ToolkitError
from interp.model import ResidualGPT


def to_hooked_transformer(*args, **kwargs):
    """A checkpoint or ResidualGPT as a TransformerLens HookedTransformer (see interp.hooked)."""
    from interp.hooked import to_hooked_transformer as convert

    return convert(*args, **kwargs)


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "ModelConfig",
    "ResidualGPT",
    "ToolkitError",
    "load_checkpoint",
    "save_checkpoint",
    "to_hooked_transformer",
]
