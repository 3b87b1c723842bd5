"""The TL 4 bridge's hooks checked as ResidualGPT's and the 3.x export's are (interp.model.api.BoundaryHooks):
a hook name that names no hook point is a HookNameError with the closest names (TL 4 raises a bare KeyError,
or caches less without a word), a forward hook's return of another shape, dtype or device a HookReturnError,
remove_batch_dim on a batch of more than one a ShapeError (TL 4 ends in a bare assert); a hook the mixer
lacks is said so by name (bridge_cache)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from interp.model.api import CheckedHook, batch_of_one_error, check_hook_name, check_hook_pairs
from interp.tl.bridge_cache import BridgeActivationCache, lacks_hook, lacks_hook_error
from interp.tl.bridge_generate import BridgeGenerate


def _checked_pairs(hooks: Any) -> Any:
    """(name, fn) forward-hook pairs with each fn's return checked (interp.model.api.CheckedHook)."""
    if not isinstance(hooks, (list, tuple)):
        return hooks  # TL's own error for anything else
    return [
        (pair[0], CheckedHook(pair[1]))
        if isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])
        else pair
        for pair in hooks
    ]


class BridgeHooks(BridgeGenerate):
    """ResidualBridge's hooks, checked (see the module docstring)."""

    def add_hook(self, name: Any, hook_fn: Any, dir: Any = "fwd", is_permanent: bool = False) -> None:
        """TL 4's add_hook (add_perma_hook too); a forward hook returning another shape, dtype or device than
        it got is a HookReturnError (as on ResidualGPT and the 3.x export)."""
        self._check_name(name, "name")  # HookNameError with the closest names, where TL 4 raises a KeyError
        fn = CheckedHook(hook_fn) if dir == "fwd" and callable(hook_fn) else hook_fn
        return super().add_hook(name, fn, dir=dir, is_permanent=is_permanent)

    def hooks(self, fwd_hooks: Any = (), bwd_hooks: Any = (), *args: Any, **kwargs: Any) -> Any:
        fwd, bwd = self._named_pairs(fwd_hooks, "fwd_hooks"), self._named_pairs(bwd_hooks, "bwd_hooks")
        return super().hooks(_checked_pairs(fwd), bwd, *args, **kwargs)

    def run_with_hooks(self, input: Any, fwd_hooks: Any = (), bwd_hooks: Any = (), *args: Any, **kwargs: Any) -> Any:
        fwd, bwd = self._named_pairs(fwd_hooks, "fwd_hooks"), self._named_pairs(bwd_hooks, "bwd_hooks")
        return super().run_with_hooks(input, _checked_pairs(fwd), bwd, *args, **kwargs)

    def _named_pairs(self, hooks: Any, arg: str) -> list[Any]:
        """(name or filter, function) pairs whose names each name a hook point: HookNameError with the closest
        names, as on ResidualGPT and the 3.x export (TL 4 raises a bare KeyError or skips the name)."""
        pairs = check_hook_pairs(hooks, arg)
        for name, _ in pairs:
            self._check_name(name, arg)
        return pairs

    def _check_name(self, name: Any, arg: str) -> None:
        """A hook the mixer lacks (hook_pattern of position_blind) is said so by name; else check_hook_name's."""
        for each in name if isinstance(name, (list, tuple, set, frozenset)) else [name]:
            if isinstance(each, str) and lacks_hook(self.residual_gpt.cfg, each):
                raise lacks_hook_error(self.residual_gpt.cfg, each)
        check_hook_name(self, name, arg)

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """TL 4's; names_filter names hook points (HookNameError otherwise, where TL 4 raises a KeyError or caches
        less), and remove_batch_dim takes a batch of one (ShapeError, where TL 4 ends in a bare assert)."""
        first = args[0] if args else kwargs.get("input")
        self._check_input(args, kwargs, "run_with_cache")  # ExportGuards' check
        if kwargs.get("remove_batch_dim"):
            n = first.shape[0] if isinstance(first, Tensor) and first.dim() >= 2 else None
            n = len(first) if isinstance(first, (list, tuple)) else n
            if n is not None and n != 1:
                raise batch_of_one_error(n, "the input")
        if kwargs.get("names_filter") is not None:
            self._check_name(kwargs["names_filter"], "names_filter")
        out, cache = super().run_with_cache(*args, **kwargs)
        return out, BridgeActivationCache.of(cache, self)
