"""The residual-ablation GPT and what reads it.

Names are imported lazily: `from interp.config.model_config import ModelConfig` stays light
(no transformer_lens import), so command-line errors come back at once.
"""

import importlib
import importlib.util

from interp.command.entry import refuse_library_module
from interp.command.signals import guard_startup
from interp.config import registry as _registry

guard_startup()  # a Ctrl-C while modules import: one line, not a traceback
refuse_library_module(__file__)  # python -m <a module that does not run>: one line, exit 2
# The registry imports the built-in mixers on their first lookup, through this loader (it imports nothing above it).
_registry.load_builtins_with(lambda: importlib.import_module("interp.model.mixers"))

_LAZY = {
    "Checkpoint": "interp.files.checkpoint",
    "load_checkpoint": "interp.files.checkpoint",
    "save_checkpoint": "interp.files.checkpoint",
    "ModelConfig": "interp.config.model_config",
    "CheckpointError": "interp.errors",
    "ConfigError": "interp.errors",
    "DataError": "interp.errors",
    "ToolkitError": "interp.errors",
    "ResidualGPT": "interp.model.gpt",
    "to_hooked_transformer": "interp.tl.hooked",
    "save_hooked": "interp.tl.hooked",
    "load_hooked": "interp.tl.hooked",
    "to_transformer_bridge": "interp.tl.bridge",
    "save_bridge": "interp.tl.bridge",
    "load_bridge": "interp.tl.bridge",
    "load_tl": "interp.tl.load",
    "TL_MAJOR": "interp.tl.major",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if importlib.util.find_spec(f"interp.{name}") is not None:  # a submodule (interp.tl) without importing it first
        return importlib.import_module(f"interp.{name}")
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = sorted(_LAZY)
