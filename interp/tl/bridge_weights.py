"""The TL 4 bridge's weight properties (W_O, W_out, b_*, ...) and in-place edits of them.

A TL weight the bridge shows is a view of ResidualGPT's own parameter where it can be (an edit reaches the
model); W_O / W_out with runtime_gain folded in, or a zero bias the model lacks, are computed: an in-place edit
of such a tensor (or of a view of it) is written back into the model's weight, divided by the gain, or refused
where the model has no such weight (interp.tl.bridge_adapter reads them through exposed_weight).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from interp.errors import ToolkitError

# torch's in-place methods end in "_"; these few change metadata, not values.
_NOT_VALUE_EDITS = frozenset({"requires_grad_", "share_memory_", "retain_grad", "record_stream"})
_AUGMENTED = frozenset(
    f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul")
)


def _edits_values(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    if name == "__setitem__" or name in _AUGMENTED:
        return True
    return name.endswith("_") and not name.endswith("__") and name not in _NOT_VALUE_EDITS


class _Home:
    """Where an in-place edit of a computed TL weight goes: `model` (a view of ResidualGPT's weight in TL's
    layout) times `gain` is the weight as returned, so an edited entry v is written back as v / gain. None for
    a weight the model lacks (a bias of a bias=False model, the uniform mixer's zero W_Q): then refused."""

    def __init__(self, label: str, model: Tensor | None, gain: float, why: str):
        self.label, self.model, self.gain, self.why = label, model, gain, why
        self.root: Tensor | None = None  # the tensor returned (set by _derived)
        self.seen: Tensor | None = None  # its values as last written back: only what the user changed goes back

    def refuse(self) -> ToolkitError:
        return ToolkitError(
            f"{self.label} is computed by the bridge ({self.why}), so an in-place edit of it would change "
            "nothing in the model; edit ResidualGPT's own weight (bridge.residual_gpt, its parameters by name), "
            "or ablate with a hook (run_with_hooks on hook_z / hook_attn_out / hook_post / hook_mlp_out)"
        )

    def write_back(self) -> None:
        root, seen, model = self.root, self.seen, self.model
        assert root is not None and seen is not None and model is not None
        with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
            changed = (root != seen) & ~(root.isnan() & seen.isnan())
            if bool(changed.any()):
                model[changed] = (root[changed] / self.gain).to(model.dtype)
                seen.copy_(root)


class _DerivedWeight(torch.Tensor):
    """A TL weight the bridge computes from ResidualGPT's rather than a view of it (W_O and W_out times
    runtime_gain, a zero bias the model lacks). An in-place edit of it - or of a view of it: W_O[h] = 0,
    .data[...] = 0, W_out[:k].zero_() - is written back into ResidualGPT's weight where the model has one, as
    an edit of the 3.x export's parameters reaches its forward; else it is a ToolkitError saying what works.
    Anything computed from it is a plain tensor."""

    _home: _Home

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        home = next((a._home for a in args if isinstance(a, _DerivedWeight)), None)
        edits = home is not None and _edits_values(func) and isinstance(args[0], _DerivedWeight)
        if edits and home is not None and home.model is None:
            raise home.refuse()
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            first = args[0] if args and isinstance(args[0], Tensor) else None
            view = (
                isinstance(out, Tensor)
                and first is not None
                and out is not first
                and out.numel() > 0
                and out.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
            )
        if edits and home is not None:
            home.write_back()
        if view and home is not None:  # a view of it (W_O[h], .data, .T): its edits are the weight's
            out = out.as_subclass(cls)
            out._home = home
        return out


def _derived(value: Tensor, label: str, model: Tensor | None, gain: float, why: str) -> Tensor:
    home = _Home(label, model, gain, why)
    out = value.as_subclass(_DerivedWeight)
    out._home = home
    home.root = out
    if model is not None:
        with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
            home.seen = value.detach().clone()
    return out


def exposed_weight(module: nn.Module, label: str, value: Tensor, gain: float = 1.0) -> Tensor:
    """What a TL weight property returns: a view of the module's own parameter as it is (edits reach the model),
    that view times gain as a _DerivedWeight that writes edits back, or a refusing one where it is no view."""
    storages = {p.untyped_storage().data_ptr() for p in module.parameters() if p.numel()}
    is_view = value.numel() > 0 and value.untyped_storage().data_ptr() in storages
    if is_view and gain == 1.0:
        return value
    if is_view:
        return _derived(value * gain, label, value, gain, f"the model's weight times runtime_gain={gain:g}")
    why = "a zero tensor: the model has no such weight" if not bool(value.detach().ne(0).any()) else "not a view"
    return _derived(value * gain if gain != 1.0 else value, label, None, gain, why)
