"""SAELens's HookedSAETransformer API on the 3.x export (run_with_saes, add_sae, ...): SAELens's own code.

An export is not built as a HookedSAETransformer: importing SAELens takes seconds and most users never
splice an SAE. Its first SAE call (add_sae, run_with_saes, run_with_cache_with_saes, run_with_hooks_with_saes,
saes, reset_saes) makes it one: its class becomes a subclass of SAELens's HookedSAETransformer
and of its own export class, set up as HookedSAETransformer.__init__ sets one up (mlp.hook_in, the SAE
table), and the call goes to SAELens's method unchanged. Before it, splicing checks the SAE's recorded weight
processing against the export's (interp.reading.sae.check_sae_processing). Where an SAE takes the place of a hook
point the export rewired (a removed residual's hook_resid_*, hook_*_out), the rewiring goes on around it:
the export's setup(), which SAELens calls after each change, runs rewire.keep_rewiring.
"""

from __future__ import annotations

from typing import Any

from interp.errors import ToolkitError
from interp.tl.hooked.rewire import keep_rewiring

_SAE_CLASSES: dict[type, type] = {}


def _hooked_sae_transformer() -> type:
    try:
        from sae_lens import HookedSAETransformer
    except ImportError:
        raise ToolkitError(
            "SAELens is not installed: pip install -c constraints/tl3.txt -e '.[sae]' (make setup installs it; "
            "it needs TransformerLens 3)"
        ) from None
    return HookedSAETransformer


class _CheckedSAEs:
    """add_sae (run_with_saes and the rest come here): the SAE's recorded processing checked, then SAELens's."""

    def add_sae(self, sae: Any, *args: Any, **kwargs: Any) -> Any:
        from interp.reading.sae import check_sae_processing

        check_sae_processing(sae, self)
        return super().add_sae(sae, *args, **kwargs)  # type: ignore[misc]


def sae_export_class(cls: type) -> type:
    """The HookedSAETransformer subclass of the export class `cls` (made once per class, importable by name)."""
    if cls not in _SAE_CLASSES:
        name = f"SAE{cls.__name__}"
        made = type(name, (_CheckedSAEs, _hooked_sae_transformer(), cls), {"__module__": __name__})
        made.__qualname__ = name
        globals()[name] = made  # importable by name (SAELens's own mlp.hook_in lambdas still keep torch.save out)
        _SAE_CLASSES[cls] = made
    return _SAE_CLASSES[cls]


def become_sae_transformer(model: Any) -> Any:
    """`model` (an export) as a HookedSAETransformer, in place: its class, and what HookedSAETransformer.__init__
    adds after HookedTransformer's (a hook_in on each MLP, the table of attached SAEs)."""
    if isinstance(model, tuple(_SAE_CLASSES.values())):
        return model
    model.__class__ = sae_export_class(type(model))
    from sae_lens.analysis.hooked_sae_transformer import add_hook_in_to_mlp

    for block in model.blocks:
        if hasattr(block, "mlp"):
            add_hook_in_to_mlp(block.mlp)
    model._acts_to_saes = {}
    model._transcoder_output_hooks = {}
    model.setup()
    return model


class SAEMethods:
    """The export's SAELens methods: each makes the export a HookedSAETransformer (become_sae_transformer),
    whose own method then runs; and setup() keeps the rewiring where a module replaced a rewired hook point."""

    def setup(self) -> None:
        keep_rewiring(self)  # type: ignore[arg-type]
        super().setup()  # type: ignore[misc]

    @property
    def acts_to_saes(self) -> Any:
        """SAELens's HookedSAETransformer.acts_to_saes: {hook name: SAE}; an empty dict before the first SAE call,
        which reading it is not (hasattr, inspect.getmembers and a debugger read every property)."""
        return {}  # from the first SAE call on, HookedSAETransformer's own property answers (it precedes this class)


def _becoming(name: str) -> Any:
    """The export's method `name`: the export becomes a HookedSAETransformer, whose own `name` then runs."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(become_sae_transformer(self), name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"SAELens's HookedSAETransformer.{name} (the export becomes one at this first call)."
    return method


for _name in ("add_sae", "run_with_saes", "run_with_cache_with_saes", "run_with_hooks_with_saes", "saes", "reset_saes"):
    setattr(SAEMethods, _name, _becoming(_name))

__all__ = ["SAEMethods", "become_sae_transformer", "sae_export_class"]
