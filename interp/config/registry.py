"""The mixer registry: every token mixer by name, and what it declares it can do.

A mixer is one class (interp.model.mixers.Mixer) that declares next to its forward
whether it has an attention pattern and heads, its hook sites, how it exports
to TransformerLens (or why it cannot) and how it decomposes. Everything that
depends on the mixer - ModelConfig validation, ResidualGPT's blocks, the export,
interp.reading.decompose, the alpha_tt probe, plot_attention - asks `mixer_spec(name)`
here, never the name itself. Adding a mixer (see interp.model.mixers):

    from interp.model.mixers import Mixer            # or PatternMixer for a softmax-pattern mixer
    from interp.config.registry import register_mixer

    @register_mixer
    class MyMixer(Mixer, nn.Module):
        name = "my_mixer"
        ...

This module is light (no torch): validating a config or a command line must
answer at once. So the built-in mixers' names are listed here; their classes
load from interp.model.mixers on first lookup (tests/test_mixer_registry.py checks
that the two agree), through the loader interp/__init__.py hands in: this module
imports nothing above it, and interp.model.mixers imports it to register its classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from interp.errors import ConfigError, ToolkitError

BUILTIN_MIXERS = ("attention", "uniform", "position_blind")  # defined, with their declarations, in interp.model.mixers
_BUILTIN_MODULE = "interp.model.mixers"
_REGISTRY: dict[str, type] = {}
_load_builtins: Callable[[], Any] | None = None  # handed in by interp/__init__.py: imports interp.model.mixers


def load_builtins_with(loader: Callable[[], Any]) -> None:
    """How the built-in mixers load on first lookup: `loader` imports interp.model.mixers (their classes register as
    it runs) and returns it. interp/__init__.py hands it in, so every import of the package has it."""
    global _load_builtins
    _load_builtins = loader


def _builtins() -> Any:
    """interp.model.mixers, imported: the built-ins registered, and its Mixer base."""
    if _load_builtins is None:
        raise ToolkitError(  # interp/__init__.py hands the loader in (load_builtins_with); a reload forgets it
            "the mixer registry has no built-ins (interp.config.registry was reloaded on its own): "
            "importlib.reload(interp) as well, or restart the kernel"
        )
    return _load_builtins()


def register_mixer(cls: type) -> type:
    """Class decorator: make `cls` the mixer for `mixer=cls.name` (a name is registered once).

    The class must subclass interp.model.mixers.Mixer; the built-in names belong to
    interp.model.mixers; a name taken by a class of another module or qualname is refused
    (only the same class defined again, a module reloaded, replaces it).
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"a mixer class needs a `name` that is an identifier, got {name!r} on {cls.__name__}")
    where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', type(cls).__name__)}"
    if name in BUILTIN_MIXERS and cls.__module__ != _BUILTIN_MODULE:
        raise ConfigError(f"mixer name {name!r} is a built-in of {_BUILTIN_MODULE}; give {where} another name")
    mixer_base = _builtins().Mixer  # on first use: this module stays light (no torch)
    if not (isinstance(cls, type) and issubclass(cls, mixer_base)):
        raise ConfigError(f"mixer {name!r}: {where} must subclass interp.model.mixers.Mixer (with an nn.Module)")
    for flag in ("has_pattern", "has_heads", "takes_self_bias"):
        if not isinstance(getattr(cls, flag, None), bool):
            raise ConfigError(
                f"mixer {name!r} must declare {flag} as True or False (subclass interp.model.mixers.Mixer)"
            )
    _check_params_declaration(cls, name, where)
    taken = _REGISTRY.get(name)
    if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ConfigError(f"mixer name {name!r} is already taken by {taken.__module__}.{taken.__qualname__}")
    _REGISTRY[name] = cls  # the same class defined again (a module reloaded): the newer one
    return cls


def _check_params_declaration(cls: type, name: str, where: str) -> None:
    """`params`: parameter name -> default, each a bool, int, finite float or str (what a variant name spells)."""
    params = getattr(cls, "params", {})
    if not isinstance(params, dict):
        raise ConfigError(f"mixer {name!r}: {where}.params must be a dict of parameter name -> default")
    for key, default in params.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ConfigError(f"mixer {name!r}: parameter name {key!r} must be an identifier")
        if not isinstance(default, (bool, int, float, str)) or (isinstance(default, float) and default != default):
            raise ConfigError(
                f"mixer {name!r}: parameter {key} needs a default that is a bool, int, float or str, got {default!r}"
            )
    if params and name in BUILTIN_MIXERS:  # ModelConfig validates a built-in's config without importing torch
        raise ConfigError(
            f"built-in mixer {name!r} declares parameters; a built-in declares none (interp.config.model_config)"
        )


def mixer_names() -> tuple[str, ...]:
    """Every mixer a ModelConfig may name: the built-ins, then those registered since, in order."""
    return (*BUILTIN_MIXERS, *(n for n in _REGISTRY if n not in BUILTIN_MIXERS))


def mixer_spec(name: str) -> Any:
    """The registered mixer class for `name`: its declarations (has_pattern, has_heads, ...) and its forward."""
    if name not in _REGISTRY and name in BUILTIN_MIXERS:
        _builtins()  # registers the built-ins
    if name not in _REGISTRY:
        raise ConfigError(
            f"unknown mixer {name!r}; registered: {mixer_names()} "
            "(register one with interp.config.registry.register_mixer)"
        )
    return _REGISTRY[name]


class _MixerNames(Sequence):
    """A live, read-only view of mixer_names(): `name in MIXERS`, iteration, argparse's choices=MIXERS."""

    def __getitem__(self, index):
        return mixer_names()[index]

    def __len__(self) -> int:
        return len(mixer_names())

    def __contains__(self, name: object) -> bool:
        return name in mixer_names()

    def __repr__(self) -> str:
        return repr(mixer_names())


MIXERS: Sequence[str] = _MixerNames()

__all__ = ["BUILTIN_MIXERS", "MIXERS", "mixer_names", "mixer_spec", "register_mixer"]
