"""TransformerLens's cache methods that read the residual stream as a sum or through a LayerNorm's scale alone,
checked at every call on the toolkit's exports - a cache built by hand (ActivationCache(store, model)) included.

TL's ActivationCache methods read `self.model`; install() wraps the ones below so that, when the model defines
`_check_stream_read(method, arguments)` (the 3.x export, the TL 4 bridge), it is asked first: it warns (each
call: interp.errors.warn_each_call) or refuses. A model without it (any other TL model) is left as TL made it.
Nested calls (decompose_resid -> apply_ln_to_stack, logit_attrs -> tokens_to_residual_directions) are checked
once, at the outermost call, which names the method the user called.

    additive    decompose_resid, get_full_resid_decomposition, stack_head_results, stack_neuron_results,
                logit_attrs: the stack sums to the stream only where every sublayer output reaches it
                (residual='full'). The model's own accumulated_bias sums every b_O and b_out alike; it is not a
                cache method, so the export and the bridge check it in their override (ADDITIVE_MODEL_METHODS).
                Not so accumulated_resid (the stream itself), get_neuron_results, compute_head_results and
                stack_activation (what each neuron / head / layer writes or holds, whatever reaches the stream)
    LayerNorm   apply_ln_to_stack and every method with apply_ln=True divide by the cached scale but never
                multiply by the LayerNorm's weight (nor add its bias): right only where fold_ln moved them into
                the next weights (the 3.x export's default; the TL 4 bridge cannot fold). Not so
                accumulated_resid(apply_ln=True) up to the unembedding (TL 3.9 and 4 apply ln_final itself
                there: recompute_ln) nor apply_ln_to_stack(recompute_ln=True)
    b_U         a stack that reaches the unembedding, and tokens_to_residual_directions, leave out b_U: the logit
                is the stack . W_U[:, t] + b_U[t]. fold_ln puts ln_final.b there (a bias=True model), so each
                warns at every call where b_U is not zero (UnembedBiasWarning); logit_attrs says so itself
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from interp.errors import ScopedFlag, UnembedBiasWarning, UnfoldedLayerNormWarning, warn_each_call

# The stacks of sublayer outputs: each is a sum (additive) and, with apply_ln=True, reads a LayerNorm's scale.
_STACKS = ("decompose_resid", "get_full_resid_decomposition", "stack_head_results", "stack_neuron_results")
ADDITIVE_METHODS = (*_STACKS, "logit_attrs")
ADDITIVE_MODEL_METHODS = ("accumulated_bias",)
LN_METHODS = ("apply_ln_to_stack", "accumulated_resid", *_STACKS)
_WRAPPED = tuple(dict.fromkeys(ADDITIVE_METHODS + LN_METHODS))
_IN_CALL = ScopedFlag("interp_stream_read")


@contextmanager
def outermost() -> Iterator[bool]:
    """True for the outermost checked call (it checks), False inside one (already checked)."""
    if _IN_CALL:
        yield False
        return
    with _IN_CALL.raised():
        yield True


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        check = getattr(self.model, "_check_stream_read", None)
        if check is None:
            return original(self, *args, **kwargs)
        with outermost() as first:
            if first:
                try:
                    bound = signature.bind(self, *args, **kwargs)
                except TypeError:  # TL's own error for a bad call
                    return original(self, *args, **kwargs)
                bound.apply_defaults()
                check(name, dict(bound.arguments))
            return original(self, *args, **kwargs)

    method.interp_checked = True  # type: ignore[attr-defined]
    return method


def install() -> None:
    """Wrap TL's ActivationCache methods (once per process; TL 3.9 and 4.x alike)."""
    from transformer_lens import ActivationCache

    for name in _WRAPPED:
        original = ActivationCache.__dict__.get(name)
        if original is not None and not getattr(original, "interp_checked", False):
            setattr(ActivationCache, name, _wrap(name, original))


# --------------------------------------------------------------------------- the LayerNorm a method reads


def _ln_tensor(module: Any, name: str) -> torch.Tensor | None:
    for owner in (module, getattr(module, "original_component", None)):  # TL 3's LayerNorm, or the bridge's
        value = getattr(owner, name, None)
        if isinstance(value, torch.Tensor):
            return value
    return None


def unfolded(module: Any) -> bool:
    """Whether a LayerNorm applies a weight other than 1 or a bias other than 0 (TL's LNPre applies neither)."""
    w, b = _ln_tensor(module, "w"), _ln_tensor(module, "b")
    return (w is not None and bool(w.detach().ne(1).any())) or (b is not None and bool(b.detach().ne(0).any()))


def ln_read(model: Any, method: str, args: dict[str, Any]) -> tuple[str, Any] | None:
    """The LayerNorm (name, module) whose scale `method` applies with these arguments, or None if none."""
    if method not in LN_METHODS or (method != "apply_ln_to_stack" and not args.get("apply_ln")):
        return None
    if reaches_unembed(model, method, args):
        recomputes = args.get("recompute_ln") if method == "apply_ln_to_stack" else method == "accumulated_resid"
        if recomputes:
            return None  # TL applies ln_final itself, weight and bias included (the logit lens)
        return "ln_final", model.ln_final
    layer = args["layer"]  # below n_layers: reaches_unembed said so
    which = "ln2" if args.get("mlp_input") else "ln1"
    return f"blocks.{layer}.{which}", getattr(model.blocks[layer], which)


def warn_unfolded(model: Any, method: str, args: dict[str, Any], fix: str) -> None:
    """UnfoldedLayerNormWarning at the user's call where `method` reads an unfolded LayerNorm."""
    read = ln_read(model, method, args)
    if read is None or not unfolded(read[1]):
        return
    name = read[0]
    warn_each_call(
        f"ActivationCache.{method} divides by {name}'s cached scale but never multiplies by {name}.w (nor adds "
        f"{name}.b), which this model's LayerNorm applies (its weights are not folded), so the stack is not what "
        f"{'the unembedding' if name == 'ln_final' else 'the next layer'} reads and a dot product with W_U "
        f"(tokens_to_residual_directions) is not the logit; {fix}",
        UnfoldedLayerNormWarning,
    )


def warn_unfolded_directions(model: Any, fix: str) -> None:
    """UnfoldedLayerNormWarning for tokens_to_residual_directions where ln_final is not folded into W_U."""
    if unfolded(model.ln_final):
        warn_each_call(
            "tokens_to_residual_directions gives W_U's columns, but this model's ln_final.w (and .b) are not "
            "folded into W_U, so a stack from apply_ln_to_stack / accumulated_resid(apply_ln=True) dotted with "
            f"them is not the logit (difference); {fix}",
            UnfoldedLayerNormWarning,
        )


# --------------------------------------------------------------------------- b_U, which no stack holds

_BIAS_FIX = (
    "add tl.b_U[answer] - tl.b_U[wrong] to a logit difference (tl.b_U[tokens] to a logit), "
    "or use interp.reading.decompose "
    "(direct_logit_attribution, logit_lens), which includes it"
)


def unembed_bias(model: Any) -> torch.Tensor | None:
    """The model's b_U where it is not zero (fold_ln moved ln_final.b there), else None."""
    try:
        b = model.b_U
    except AttributeError:
        return None
    return b if isinstance(b, torch.Tensor) and bool(b.detach().ne(0).any()) else None


def reaches_unembed(model: Any, method: str, args: dict[str, Any]) -> bool:
    """Whether `method` with these arguments gives a stack scaled as the unembedding reads it."""
    if method not in LN_METHODS or (method != "apply_ln_to_stack" and not args.get("apply_ln")):
        return False
    layer = args.get("layer")
    return layer is None or layer == -1 or layer >= model.cfg.n_layers


def warn_unembed_bias(model: Any, method: str, args: dict[str, Any]) -> None:
    """UnembedBiasWarning at the user's call where a stack read at the unembedding will miss a nonzero b_U."""
    if reaches_unembed(model, method, args) and unembed_bias(model) is not None:
        warn_each_call(
            f"ActivationCache.{method} gives the stream as the unembedding reads it, but this model's logits also "
            "add b_U (not zero: fold_ln moved ln_final.b there), which no stack holds, so its dot product with W_U "
            f"(tokens_to_residual_directions) misses b_U[token]; {_BIAS_FIX}",
            UnembedBiasWarning,
        )


def warn_unembed_bias_directions(model: Any) -> None:
    """UnembedBiasWarning for tokens_to_residual_directions where b_U is not zero."""
    if unembed_bias(model) is not None:
        warn_each_call(
            "tokens_to_residual_directions gives W_U's columns, but this model's logits also add b_U (not zero: "
            "fold_ln moved ln_final.b there), so a stack dotted with them is the logit (difference) less b_U[token] "
            f"(less b_U[answer] - b_U[wrong]); {_BIAS_FIX}",
            UnembedBiasWarning,
        )
