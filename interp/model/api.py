"""The Python API's boundary: what a notebook hands a public function, checked where it enters, once.

    what is handed                                      checked by             at
    token ids [batch, pos] (and targets), device        check_forward_inputs   ResidualGPT.forward
    token ids against a vocabulary (tensor, list, int)  check_ids, id_list     forward, generate, codec.decode,
                                                                               tokens_to_residual_directions,
                                                                               direct_logit_attribution, the export
    next-token targets (ids, or -1: masked)             check_targets          forward (on torch's IndexError),
                                                                               per_sequence_loss
    hook names, names_filter                            check_hook_name        BoundaryHooks (ResidualGPT, export)
    what a user's forward hook returns                  CheckedHook            BoundaryHooks
    remove_batch_dim on a batch of more than one        BatchOfOne             BoundaryHooks.get_caching_hooks
    a name a cache lacks                                missing_cache_key      the caches' __getitem__
    probe and intervention batches, (x, y)              as_batch_pairs,        probes, interventions,
                                                        check_pair             logit_lens_over
    q / k for attention scores                          check_qk               interp.reading.scores.attention_scores
    a model on the meta device                          check_materialised     to_hooked_transformer
    model.cfg edited after the model was built          check_config_unedited  forward, the exports, decompose
    a cache from another model or wiring                interp.reading.cache_origin (decompose)

Each kind of mistake has one error type (interp.errors: ShapeError, TokenIdError, ArgumentError,
HookNameError, HookReturnError, ConfigEditedError, CacheMismatchError) and each message starts with the
argument it is about. The checks on the forward pass are attribute reads and comparisons (no tensor is read on the
training path: an id out of range there is diagnosed from the embedding's own IndexError).

Light at import (no torch until a tensor is checked): interp.model.vocab imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from interp.errors import (
    ArgumentError,
    ConfigEditedError,
    ConfigError,
    HookNameError,
    HookReturnError,
    ShapeError,
    TokenIdError,
    closest_names,
)
from interp.model.next_token import check_temperature


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _describe(x: Any) -> str:
    if _is_tensor(x):
        return f"a {str(x.dtype).removeprefix('torch.')} tensor of shape {tuple(x.shape)} on {x.device}"
    return f"a {type(x).__name__}"


# --------------------------------------------------------------------------- token ids


def check_forward_inputs(tokens: Any, targets: Any, n_ctx: int, device: Any = None) -> None:
    """ResidualGPT.forward's tokens [batch, pos] (and targets of the same shape): kind, dims, dtype, length, and
    the model's device."""
    import torch

    if not isinstance(tokens, torch.Tensor):
        raise ArgumentError(
            f"tokens: ResidualGPT takes token ids (a LongTensor [batch, pos]), not {type(tokens).__name__}: encode "
            "text with model.codec.encode(text) (torch.tensor([...]) around it), or call model.generate(text)"
        )
    if tokens.dtype not in (torch.long, torch.int):
        raise ShapeError(f"tokens: token ids must be integers (torch.long), got a {tokens.dtype} tensor")
    if tokens.dim() != 2:
        hint = "; for one sequence pass tokens[None]" if tokens.dim() == 1 else ""
        raise ShapeError(f"tokens: ResidualGPT takes token ids [batch, pos], got shape {tuple(tokens.shape)}{hint}")
    n = tokens.shape[1]
    if n > n_ctx:
        raise ShapeError(f"tokens: sequence length {n} exceeds n_ctx {n_ctx}")
    if n == 0:
        raise ShapeError(f"tokens: no positions (shape {tuple(tokens.shape)}); give at least one token per row")
    if device is not None and not _same_device(tokens.device, device):
        raise ShapeError(f"tokens: on {tokens.device}, the model on {device}; move them: tokens.to({str(device)!r})")
    if targets is None:
        return
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.dtype == torch.bool:
        raise ShapeError(f"targets: next-token ids (a LongTensor like tokens), got {_describe(targets)}")
    if targets.shape != tokens.shape:
        raise ShapeError(
            f"targets: shape {tuple(targets.shape)} differs from tokens' {tuple(tokens.shape)}; give one target per "
            "token (x = ids[:, :-1], y = ids[:, 1:])"
        )


def _same_device(a: Any, b: Any) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def check_ids(ids: Any, n_vocab: int, arg: str = "tokens", device: Any = None) -> Any:
    """ids (an int, a list of ints or an integer tensor) as a LongTensor, each in 0..n_vocab-1; else TokenIdError
    naming arg and the first id outside (a negative id would silently index from the end)."""
    import torch

    if isinstance(ids, str) or ids is None:
        raise ArgumentError(f"{arg}: token ids (an int, a list of ints or an integer tensor), not {_describe(ids)}")
    if isinstance(ids, torch.Tensor):
        t = ids.to(device) if device is not None else ids
    else:
        try:
            t = torch.as_tensor(ids, device=device)
        except (TypeError, ValueError, RuntimeError):
            raise ArgumentError(
                f"{arg}: token ids (an int, a list of ints or an integer tensor), not {ids!r:.60}"
            ) from None
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TokenIdError(f"{arg}: token ids must be integers, got a {t.dtype} tensor")
    if t.numel() and t.device.type != "meta":
        low, high = int(t.min()), int(t.max())
        if low < 0 or high >= n_vocab:
            bad = low if low < 0 else high
            raise TokenIdError(f"{arg}: token id {bad} is outside the vocabulary (ids 0..{n_vocab - 1})")
    return t.long()


def check_sampling(max_new_tokens: Any, top_k: Any = None, top_p: Any = None) -> None:
    """generate's sampling options (ResidualGPT's and both exports'): max_new_tokens an int >= 0, top_k an int
    >= 1 or None, top_p in (0, 1] or None; else one ConfigError (TransformerLens's would be an AssertionError)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ConfigError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")


def check_generate_args(tokens: Any, max_new_tokens: Any, temperature: Any, top_k: Any, n_vocab: int) -> float:
    """ResidualGPT.generate's arguments checked (a prompt of integer ids [batch, pos >= 1] inside the vocabulary,
    max_new_tokens >= 0, top_k >= 1 or None), one ConfigError each; the temperature as generate uses it."""
    if not _is_tensor(tokens):
        raise ConfigError(
            f"generate takes integer tokens [batch, pos] (a tensor) or one string, not {type(tokens).__name__}"
        )
    if tokens.dim() != 2 or tokens.shape[1] == 0 or tokens.is_floating_point():
        raise ConfigError(f"generate takes integer tokens [batch, pos] with pos >= 1, got {tuple(tokens.shape)}")
    check_sampling(max_new_tokens, top_k)
    checked = check_temperature(temperature)
    check_ids(tokens, n_vocab, "tokens (the prompt)")
    return checked


def check_targets(targets: Any, n_vocab: int, arg: str = "targets") -> Any:
    """Next-token targets: ids in 0..n_vocab-1, or -1 (nanoGPT's ignore_index: masked out of the loss)."""
    kept = targets[targets != -1] if _is_tensor(targets) else targets
    try:
        check_ids(kept, n_vocab, arg)
    except TokenIdError as e:
        raise TokenIdError(f"{e}; -1 masks a position out of the loss") from None
    return targets


def id_list(ids: Iterable[Any], n_vocab: int, arg: str = "ids") -> list[int]:
    """Token ids as plain ints in 0..n_vocab-1 (codec.decode): no torch, no negative indexing."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ArgumentError(f"{arg}: a sequence of token ids (ints), not {type(ids).__name__}")
    out = []
    for i in ids:
        if hasattr(i, "item") and getattr(i, "ndim", 0) == 0:  # a 0-d tensor or numpy scalar
            i = i.item()
        if isinstance(i, bool) or not isinstance(i, int):
            raise ArgumentError(f"{arg}: token ids must be ints, got {i!r:.40}")
        if not 0 <= i < n_vocab:
            raise TokenIdError(f"{arg}: token id {i} is outside the vocabulary (ids 0..{n_vocab - 1})")
        out.append(i)
    return out


# --------------------------------------------------------------------------- hooks


def check_hook_name(model: Any, name: Any, arg: str) -> None:
    """A hook name (str), a list of names or a filter function that names at least one hook point of model."""
    points = model.hook_dict
    n_layers = getattr(model.cfg, "n_layers", None)
    layers = f"; layers 0..{n_layers - 1}" if n_layers else ""
    if isinstance(name, str):
        if name not in points:
            raise HookNameError(
                f"{arg}: this model has no hook point named {name!r}{closest_names(name, points)}{layers} "
                "(model.hook_dict lists every hook point)"
            )
        return
    if isinstance(name, (list, tuple, set, frozenset)):
        if not name:
            raise HookNameError(f"{arg}: an empty list names no hook point (None means every one)")
        for each in name:
            check_hook_name(model, each, arg)
        return
    if not callable(name):
        raise ArgumentError(f"{arg}: a hook name, a list of names or a function of a name, not {_describe(name)}")
    if not any(name(point) for point in points):
        raise HookNameError(f"{arg}: the filter function matches no hook point of this model (see model.hook_dict)")


def check_hook_pairs(hooks: Any, arg: str) -> list[Any]:
    """fwd_hooks / bwd_hooks as a list of (name or filter, function) pairs (names are checked as they are added)."""
    if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Iterable):
        raise ArgumentError(f"{arg}: a list of (hook name, function) pairs, not {_describe(hooks)}")
    hooks = list(hooks)
    for i, pair in enumerate(hooks):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ArgumentError(f"{arg}[{i}]: a (hook name, function) pair, not {pair!r:.60}")
        if not callable(pair[1]):
            raise ArgumentError(f"{arg}[{i}]: the hook for {pair[0]!r:.60} is not callable ({_describe(pair[1])})")
    return hooks


def _hook_label(fn: Any) -> str:
    fn = fn.func if isinstance(fn, partial) else fn
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class CheckedHook:
    """A user's forward hook whose return is checked: None, or a tensor of the shape, dtype and device it got.

    A smaller tensor (x[..., :1], x[:, :1]) would be broadcast into the stream or shorten the logits without a
    word; here it is a HookReturnError naming the hook function and the hook point.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def __call__(self, x: Any, hook: Any) -> Any:
        out = self.fn(x, hook=hook)
        if out is None or out is x:
            return out
        same = (
            getattr(out, "shape", None) == x.shape
            and getattr(out, "dtype", None) == x.dtype
            and getattr(out, "device", None) == x.device
        )
        if not same:
            raise HookReturnError(
                f"hook {_hook_label(self.fn)} on {getattr(hook, 'name', '?')} returned {_describe(out)}, but it "
                f"received {_describe(x)}: a forward hook returns None or a tensor of the same shape, dtype and "
                "device (a smaller one would be broadcast or shorten the output silently); edit a copy, e.g. "
                "y = x.clone(); y[..., :1] = 0; return y"
            )
        return out

    def __repr__(self) -> str:  # TransformerLens names the torch hook after it (model.list_hooks)
        return f"partial({self.fn.func!r},...)" if isinstance(self.fn, partial) else repr(self.fn)


class BatchOfOne:
    """A caching hook of run_with_cache(remove_batch_dim=True): refuses a batch of more than one, where
    TransformerLens 3 would cache row 0 only (TransformerLens 4 asserts the same)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def __call__(self, x: Any, hook: Any) -> Any:
        if x.dim() == 0 or x.shape[0] != 1:
            raise batch_of_one_error(x.shape[0] if x.dim() else 0, getattr(hook, "name", "the input"))
        return self.fn(x, hook=hook)


def batch_of_one_error(n: int, where: str) -> ShapeError:
    return ShapeError(
        f"remove_batch_dim: True caches a batch of one, but {where} has a batch of {n}; TransformerLens 3 would "
        "keep row 0 only. Run one sequence (tokens[:1]) or leave remove_batch_dim off and index the cache"
    )


class BoundaryHooks:
    """A mixin before HookedRootModule (ResidualGPT) or HookedTransformer (the export): every hook name is checked
    as it is added (with the closest real names when it names nothing), every forward hook's return is checked
    (CheckedHook), and run_with_cache's names_filter and remove_batch_dim are checked. Nothing runs in a forward
    pass without hooks."""

    def run_with_cache(self, *model_args: Any, remove_batch_dim: bool = False, **kwargs: Any) -> Any:
        first: Any = model_args[0] if model_args else None
        if remove_batch_dim and _is_tensor(first) and first.dim() >= 2 and first.shape[0] != 1:
            raise batch_of_one_error(first.shape[0], "the input")  # before TL 4's bare assert; text: BatchOfOne
        return super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)  # type: ignore[misc]

    def hooks(self, fwd_hooks: Any = (), bwd_hooks: Any = (), *args: Any, **kwargs: Any) -> Any:
        fwd, bwd = check_hook_pairs(fwd_hooks, "fwd_hooks"), check_hook_pairs(bwd_hooks, "bwd_hooks")
        return super().hooks(fwd, bwd, *args, **kwargs)  # type: ignore[misc]  # run_with_hooks comes here too

    def _enable_hook(self, name: Any, hook: Any, dir: str = "fwd") -> Any:  # hooks(), run_with_hooks, run_with_cache
        check_hook_name(self, name, "fwd_hooks" if dir == "fwd" else "bwd_hooks")
        return super()._enable_hook(name, CheckedHook(hook) if dir == "fwd" else hook, dir)  # type: ignore[misc]

    def add_hook(self, name: Any, hook: Any, dir: str = "fwd", *args: Any, **kwargs: Any) -> Any:
        check_hook_name(self, name, "name")
        return super().add_hook(name, hook, dir, *args, **kwargs)  # type: ignore[misc]

    def check_and_add_hook(  # add_hook, add_perma_hook
        self, hook_point: Any, hook_point_name: str, hook: Any, dir: Any = "fwd", *args: Any, **kwargs: Any
    ) -> None:
        hook = CheckedHook(hook) if dir == "fwd" else hook
        super().check_and_add_hook(hook_point, hook_point_name, hook, dir, *args, **kwargs)  # type: ignore[misc]

    def get_caching_hooks(self, names_filter: Any = None, *args: Any, remove_batch_dim: bool = False, **kw: Any) -> Any:
        if names_filter is not None:
            check_hook_name(self, names_filter, "names_filter")
        cache, fwd, bwd = super().get_caching_hooks(  # type: ignore[misc]
            names_filter, *args, remove_batch_dim=remove_batch_dim, **kw
        )
        if remove_batch_dim:
            fwd = [(name, BatchOfOne(fn)) for name, fn in fwd]
        return cache, fwd, bwd

    def add_caching_hooks(self, names_filter: Any = None, *args: Any, **kwargs: Any) -> Any:
        if names_filter is not None:
            check_hook_name(self, names_filter, "names_filter")
        return super().add_caching_hooks(names_filter, *args, **kwargs)  # type: ignore[misc]


def missing_cache_key(error: KeyError, cache: Any) -> HookNameError:
    """An ActivationCache's KeyError for a name it lacks, as a HookNameError naming the closest names it holds."""
    name = str(error.args[0]) if error.args else "?"
    return HookNameError(
        f"cache: it holds no {name!r}{closest_names(name, cache.keys())} ({len(cache.keys())} names; taken with a "
        "names_filter that left it out, or a layer the model lacks?)"
    )


# --------------------------------------------------------------------------- batches, q / k


def as_batch_pairs(batches: Any, arg: str = "batches", min_pos: int = 1) -> list[tuple[Any, Any]]:
    """(x, y) pairs from (x, y) pairs or token tensors [batch, pos] (targets by shifting), at least one.

    Each x and y is an integer tensor [batch, pos] with pos >= min_pos and y of x's shape.
    """
    import torch

    if isinstance(batches, torch.Tensor):  # one batch of tokens
        batches = [batches]
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise ArgumentError(f"{arg}: a list of (x, y) pairs or token tensors [batch, pos], not {_describe(batches)}")
    pairs = []
    for i, batch in enumerate(batches):
        if isinstance(batch, torch.Tensor):
            tokens = batch if batch.dim() == 2 else batch[None]
            if tokens.dim() != 2 or tokens.shape[1] < 2:
                raise ShapeError(f"{arg}: a token batch must be [batch, pos] with pos >= 2, got {tuple(batch.shape)}")
            batch = (tokens[:, :-1], tokens[:, 1:])
        elif not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ArgumentError(
                f"{arg}[{i}]: each batch must be a token tensor or an (x, y) pair, got {_describe(batch)}"
            )
        x, y = batch
        pairs.append(check_pair(x, y, where=f"{arg}[{i}]: ", min_pos=min_pos))
    if not pairs:
        raise ArgumentError(f"{arg}: no batches; give at least one (x, y) pair or token tensor [batch, pos]")
    return pairs


def check_pair(x: Any, y: Any, where: str = "", min_pos: int = 1) -> tuple[Any, Any]:
    """Inputs x and targets y: integer token ids [batch, pos] of one shape."""
    import torch

    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.dim() != 2 or t.shape[1] < min_pos:
            pos = "pos" if min_pos <= 1 else f"pos >= {min_pos}"  # a shape that is 2-D but too short says why
            raise ShapeError(f"{where}{name}: integer token ids [batch, {pos}] expected, got {_describe(t)}")
    if x.shape != y.shape:
        raise ShapeError(f"{where}x, y: shapes {tuple(x.shape)} and {tuple(y.shape)} differ; one target per input")
    return x, y


def check_qk(q: Any, k: Any, n_heads: int, d_head: int) -> None:
    """q [batch, q_pos, head, d_head] and k [batch, k_pos, head, d_head] as hook_q / hook_k hold them; the
    queries are the last q_pos of the k_pos positions, so q_pos <= k_pos."""
    for name, t in (("q", q), ("k", k)):
        if not _is_tensor(t) or t.dim() != 4 or not t.is_floating_point():
            raise ShapeError(f"{name}: a float tensor [batch, pos, head, d_head] (hook_{name}), got {_describe(t)}")
        if tuple(t.shape[2:]) != (n_heads, d_head):
            raise ShapeError(
                f"{name}: heads and d_head {tuple(t.shape[2:])} are not the model's ({n_heads}, {d_head}); pass "
                f"cache['{name}', layer] (hook_{name}) as cached"
            )
    if q.shape[0] != k.shape[0]:
        raise ShapeError(f"q, k: batch {q.shape[0]} != {k.shape[0]}")
    if q.shape[1] > k.shape[1]:
        raise ShapeError(
            f"q, k: {q.shape[1]} query positions but {k.shape[1]} keys; queries are the last q_pos of the key "
            "positions (a kv cache), so there cannot be more queries than keys"
        )


# --------------------------------------------------------------------------- the model handed to an export


def check_materialised(model: Any, arg: str = "source") -> None:
    """Refuse a model whose weights are on the meta device (shapes without values): nothing can be read off it."""
    meta = [name for name, p in model.named_parameters() if p.device.type == "meta"]
    if meta:
        raise ShapeError(
            f"{arg}: the model's weights are on the meta device ({meta[0]}, ... {len(meta)} of them): they have "
            "shapes but no values; materialise them first (model.to_empty(device='cpu'), then load_state_dict)"
        )


# --------------------------------------------------------------------------- the config a model was built with


def check_config_unedited(model: Any, deep: bool = True) -> None:
    """Refuse a ResidualGPT whose model.cfg differs from the config it was built with (ConfigEditedError).

    deep=False (the forward pass) only notices a replaced model.cfg; deep compares every field.
    """
    built = getattr(model, "_cfg_built", None)
    if built is None or (model.cfg is built[0] and not deep):
        return
    to_dict = getattr(model.cfg, "to_dict", None)
    now, then = (to_dict() if callable(to_dict) else None), built[1]
    if now == then:
        return
    changed = (
        ", ".join(f"{k}: {then[k]!r} -> {now.get(k)!r}" for k in then if now.get(k) != then[k])
        if isinstance(now, dict)
        else f"replaced by a {type(model.cfg).__name__}"
    )
    raise ConfigEditedError(
        f"model.cfg was changed after the model was built ({changed}); its weights and blocks still compute the "
        "config they were built with. Build the model you mean: m = ResidualGPT(cfg); "
        "m.load_state_dict(model.state_dict()) (shapes permitting)"
    )


__all__ = [
    "BatchOfOne",
    "BoundaryHooks",
    "CheckedHook",
    "as_batch_pairs",
    "check_config_unedited",
    "check_materialised",
    "check_hook_name",
    "check_hook_pairs",
    "check_ids",
    "check_pair",
    "check_qk",
    "check_forward_inputs",
    "check_targets",
    "id_list",
    "missing_cache_key",
]
