"""Inference-time interventions as TransformerLens hooks: one list of (hook name, function) per intervention.

Every builder below returns `fwd_hooks` - a list of (hook name, hook function) - so the same
intervention runs on any HookedRootModule with TransformerLens's hook names: a ResidualGPT, its
export (interp.to_hooked_transformer / interp.load_tl) and a notebook's own model:

    hooks = remove_attn_residual(1) + knock_out_self(2)
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks)      # or: with model.hooks(fwd_hooks=hooks): ...

What each does, at one layer l:

    remove_attn_residual   resid_mid := attn_out. hook_attn_out records the attention output and
                           hook_resid_mid returns it in place of resid_pre + attn_out. The record is
                           the very tensor the block added, so where the model already lacks the
                           path the value is unchanged bit for bit (an exact no-op), and no
                           floating-point subtraction (resid_mid - resid_pre) is involved.
    remove_ffn_residual    resid_post := mlp_out, the same way (hook_mlp_out -> hook_resid_post).
    knock_out_self         the pattern's diagonal set to 0 and each row renormalised over the other
                           keys: exactly softmax with the self score at -inf. Written on hook_pattern,
                           not hook_attn_scores, because a row whose only allowed key is the query
                           itself (position 0, or a self_only model) would be all -inf there and
                           softmax gives NaN; here that row reads nothing (zeros), as ResidualGPT
                           does for a query with no allowed key.
    self_only              the pattern replaced by the identity: each position reads only its own
                           value. This is also the position-blind read (the routing test's
                           `position_blind` control mixes nothing across positions): with the
                           trained values and W_O it is the trained mixer made position-blind.
    uniform_pattern        the pattern replaced by causal uniform weights 1/(t+1) (the `uniform` control).
    ablate_heads           hook_z of the given heads set to 0, or to a given value (e.g. its mean).
    patch                  a site's values at given (batch, position) pairs (and head) replaced by a
                           source tensor's, e.g. a clean run's cache (activation patching).

Pattern interventions need hook_pattern and head ones hook_z (a position-blind mixer has neither):
needs_hook / applicable say whether a model has the hook points. per_sequence_loss runs a model
under hooks and returns the mean loss of each sequence (and, optionally, activations at chosen
sites as the hooks left them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import ToolkitError
from interp.model.api import as_batch_pairs, check_pair, check_targets

Hook = tuple[str, Callable[..., Any]]

LAYER_INTERVENTIONS = ("remove_attn_residual", "remove_ffn_residual", "knock_out_self", "self_only", "uniform_pattern")
HEAD_INTERVENTIONS = ("zero_head", "mean_head")


class InterventionError(ToolkitError, ValueError):
    """An intervention asked of a model that lacks its hook point, or with bad arguments."""


def _record_and_replace(source: str, target: str) -> list[Hook]:
    """target := the value source held after every earlier hook (source runs first in the same block)."""
    slot: dict[str, Tensor] = {}

    def record(x: Tensor, hook: Any) -> None:
        slot["value"] = x

    def replace(x: Tensor, hook: Any) -> Tensor:
        return slot.pop("value")

    return [(source, record), (target, replace)]


def remove_attn_residual(layer: int) -> list[Hook]:
    """resid_mid := attn_out at one layer (an exact no-op where the model has no attention residual)."""
    return _record_and_replace(f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_resid_mid")


def remove_ffn_residual(layer: int) -> list[Hook]:
    """resid_post := mlp_out at one layer (an exact no-op where the model has no FFN residual)."""
    return _record_and_replace(f"blocks.{layer}.hook_mlp_out", f"blocks.{layer}.hook_resid_post")


def _eye_like(p: Float[Tensor, "b h q k"]) -> Tensor:
    n_q, n_k = p.shape[-2:]
    q_pos = torch.arange(n_k - n_q, n_k, device=p.device)  # queries are the last n_q keys (a kv cache)
    return (q_pos[:, None] == torch.arange(n_k, device=p.device)[None, :]).to(p.dtype)


def knock_out_self(layer: int) -> list[Hook]:
    """Each query's weight on itself removed and its row renormalised (softmax with the self score at -inf)."""

    def hook(p: Float[Tensor, "b h q k"], hook: Any) -> Tensor:
        off = p * (1 - _eye_like(p))
        total = off.sum(-1, keepdim=True)
        return torch.where(total > 0, off / total.clamp_min(torch.finfo(p.dtype).tiny), torch.zeros_like(off))

    return [(f"blocks.{layer}.attn.hook_pattern", hook)]


def self_only(layer: int) -> list[Hook]:
    """Every query reads only itself (the position-blind read): the pattern becomes the identity."""

    def hook(p: Float[Tensor, "b h q k"], hook: Any) -> Tensor:
        return _eye_like(p).expand_as(p).clone()

    return [(f"blocks.{layer}.attn.hook_pattern", hook)]


def uniform_pattern(layer: int) -> list[Hook]:
    """Causal uniform attention: query t reads keys 0..t with weight 1/(t+1) each."""

    def hook(p: Float[Tensor, "b h q k"], hook: Any) -> Tensor:
        n_q, n_k = p.shape[-2:]
        q_pos = torch.arange(n_k - n_q, n_k, device=p.device)
        allowed = (torch.arange(n_k, device=p.device)[None, :] <= q_pos[:, None]).to(p.dtype)
        return (allowed / allowed.sum(-1, keepdim=True)).expand_as(p).clone()

    return [(f"blocks.{layer}.attn.hook_pattern", hook)]


def ablate_heads(layer: int, heads: int | Sequence[int], value: Tensor | None = None) -> list[Hook]:
    """hook_z of `heads` at one layer set to 0, or to `value` ([head, d_head] for all heads, or [d_head]).

    Mean ablation: value = head_means(...)[layer], the head's output averaged over a clean dataset.
    """
    heads = [heads] if isinstance(heads, int) else list(heads)
    if not heads or any(isinstance(h, bool) or not isinstance(h, int) for h in heads):
        raise InterventionError(f"heads: ablate_heads takes a head index or a list of them, got {heads!r:.60}")
    if value is not None and (not isinstance(value, Tensor) or value.dim() not in (1, 2)):
        got = f"shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
        raise InterventionError(f"value: a tensor [head, d_head] or [d_head], got {got}")

    def hook(z: Float[Tensor, "b p h dh"], hook: Any) -> Tensor:
        bad = [h for h in heads if not 0 <= h < z.shape[2]]  # -1 would silently mean the last head
        if bad:
            raise InterventionError(f"heads: layer {layer} has heads 0..{z.shape[2] - 1}, not {bad}")
        if value is not None and tuple(value.shape) not in (tuple(z.shape[2:]), tuple(z.shape[3:])):
            raise InterventionError(
                f"value: shape {tuple(value.shape)} is neither [head, d_head] {tuple(z.shape[2:])} nor [d_head] "
                f"{tuple(z.shape[3:])} of layer {layer}'s hook_z"
            )
        z = z.clone()
        for h in heads:
            z[:, :, h] = 0.0 if value is None else (value[h] if value.dim() == 2 else value).to(z)
        return z

    return [(f"blocks.{layer}.attn.hook_z", hook)]


def patch(
    name: str,
    source: Tensor,
    batch_index: Int[Tensor, " n"] | None = None,
    pos_index: Int[Tensor, " n"] | None = None,
    head: int | None = None,
) -> list[Hook]:
    """Hook `name` takes source's values at (batch_index[i], pos_index[i]) (all positions when None).

    source has the hook's shape (e.g. a clean run's cache[name]); head picks one head of a
    [batch, pos, head, d_head] site (hook_z, hook_q, ...).
    """
    if not isinstance(source, Tensor):
        raise InterventionError(
            f"source: a tensor of the hook's shape (e.g. cache[{name!r}]), not {type(source).__name__}"
        )
    if batch_index is not None and pos_index is None:
        raise InterventionError("batch_index: give pos_index with it (the (batch, position) pairs to patch)")
    if pos_index is not None:
        index = pos_index if batch_index is None else batch_index
        for arg, t in (("pos_index", pos_index), ("batch_index", index)):
            if not isinstance(t, Tensor) or t.dim() != 1 or t.is_floating_point() or len(t) != len(pos_index):
                got = f"shape {tuple(t.shape)} {t.dtype}" if isinstance(t, Tensor) else type(t).__name__
                raise InterventionError(f"{arg}: integer tensors [n], one entry per patched pair, got {got}")
    if head is not None and (isinstance(head, bool) or not isinstance(head, int)):
        raise InterventionError(f"head: one head index (an int) or None, not {head!r:.40}")

    def hook(x: Tensor, hook: Any) -> Tensor:
        if source.shape != x.shape:
            raise InterventionError(f"patch {name}: source {tuple(source.shape)} != activation {tuple(x.shape)}")
        _check_patch_indices(name, x, batch_index, pos_index, head)
        x = x.clone()
        src = source.to(x)
        if pos_index is None:
            if head is None:
                return src.clone()
            x[:, :, head] = src[:, :, head]
            return x
        b = torch.arange(len(x), device=x.device) if batch_index is None else batch_index.to(x.device)
        p = pos_index.to(x.device)
        at = (b, p) if head is None else (b, p, head)
        x[at] = src[at]
        return x

    return [(name, hook)]


def _check_patch_indices(
    name: str, x: Tensor, batch_index: Tensor | None, pos_index: Tensor | None, head: int | None
) -> None:
    """Each index inside the activation it patches: a negative one would silently count from the end (-1: the
    last position or head), one past the end would be torch's IndexError."""
    if pos_index is not None and batch_index is None and len(pos_index) != x.shape[0]:
        raise InterventionError(
            f"pos_index: without batch_index it holds one position per sequence ({x.shape[0]} of them at {name}), "
            f"got {len(pos_index)}; give batch_index for (batch, position) pairs"
        )
    dims = (("batch_index", batch_index, 0), ("pos_index", pos_index, 1))
    for arg, t, dim in dims:
        if t is not None and t.numel() and (int(t.min()) < 0 or int(t.max()) >= x.shape[dim]):
            bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
            raise InterventionError(f"{arg}: {bad} is outside {name}'s dim {dim} (0..{x.shape[dim] - 1})")
    if head is not None and (x.dim() < 4 or not 0 <= head < x.shape[2]):
        heads = f"heads 0..{x.shape[2] - 1}" if x.dim() >= 4 else f"no head dim (shape {tuple(x.shape)})"
        raise InterventionError(f"head: {head} is not a head of {name}, which has {heads}")


def no_op(names: Iterable[str]) -> list[Hook]:
    """Hooks that hand each value back untouched (a sanity check: the loss must not move)."""
    return [(name, lambda x, hook: x) for name in names]


LAYER_BUILDERS: dict[str, Callable[[int], list[Hook]]] = {
    builder.__name__: builder
    for builder in (remove_attn_residual, remove_ffn_residual, knock_out_self, self_only, uniform_pattern)
}


def needs_hook(intervention: str) -> str:
    """The hook point (under blocks.{l}) an intervention needs besides the block's own."""
    if intervention in ("knock_out_self", "self_only", "uniform_pattern"):
        return "attn.hook_pattern"
    if intervention in HEAD_INTERVENTIONS:
        return "attn.hook_z"
    if intervention in ("remove_attn_residual", "remove_ffn_residual"):
        return "hook_resid_mid"
    raise InterventionError(f"unknown intervention {intervention!r}; known: {[*LAYER_BUILDERS, *HEAD_INTERVENTIONS]}")


def applicable(model: Any, intervention: str, layer: int = 0) -> bool:
    """Whether the model has the hook point the intervention writes (a position-blind mixer has no pattern)."""
    return f"blocks.{layer}.{needs_hook(intervention)}" in model.hook_dict


def layer_hooks(intervention: str, layer: int) -> list[Hook]:
    """The hooks of a layer-level intervention by name (LAYER_INTERVENTIONS)."""
    if intervention not in LAYER_BUILDERS:
        raise InterventionError(f"unknown layer intervention {intervention!r}; known: {list(LAYER_BUILDERS)}")
    return LAYER_BUILDERS[intervention](layer)


@torch.no_grad()
def head_means(model: Any, batches: Iterable[Tensor]) -> list[Float[Tensor, "head d_head"]]:
    """Each layer's hook_z averaged over every batch and position: the values for mean ablation."""
    sums: dict[str, Tensor] = {}
    count = 0

    def keep(z: Tensor, hook: Any) -> None:
        sums[hook.name] = sums.get(hook.name, 0) + z.double().sum((0, 1))

    names = [n for n in model.hook_dict if n.endswith("attn.hook_z")]
    if not names:
        raise InterventionError("the model has no hook_z (no attention heads): mean ablation does not apply")
    batches = [x for x, _ in as_batch_pairs([(b, b) if isinstance(b, Tensor) else b for b in batches])]
    for x in batches:
        with model.hooks(fwd_hooks=[(n, keep) for n in names]):
            model(x)
        count += x.shape[0] * x.shape[1]
    return [(sums[n] / count).float() for n in names]


@torch.no_grad()
def per_sequence_loss(
    model: Any,
    x: Int[Tensor, "batch pos"],
    y: Int[Tensor, "batch pos"],
    fwd_hooks: Sequence[Hook] = (),
    keep: Sequence[str] = (),
    positions: Int[Tensor, " batch"] | None = None,
) -> tuple[Float[Tensor, " batch"], dict[str, Tensor]]:
    """Mean cross-entropy of each sequence under the hooks, and the activations at `keep` as they left them.

    positions: score one position per sequence (activation patching) instead of every position.
    A target of -1 is masked, as in the model's own loss (nanoGPT's ignore_index): the mean is over the rest.
    The keep hooks are added after fwd_hooks, so they see the intervened values.
    """
    check_pair(x, y)
    bad_positions = isinstance(positions, Tensor) and (
        positions.is_floating_point()
        or (positions.numel() and not 0 <= int(positions.min()) <= int(positions.max()) < x.shape[1])
    )
    if positions is not None and (
        not isinstance(positions, Tensor) or tuple(positions.shape) != (x.shape[0],) or bad_positions
    ):
        got = (
            f"shape {tuple(positions.shape)} {str(positions.dtype).removeprefix('torch.')} {positions.tolist()!r:.60}"
            if isinstance(positions, Tensor)
            else type(positions).__name__
        )
        raise InterventionError(
            f"positions: one position in 0..{x.shape[1] - 1} per sequence [batch={x.shape[0]}] (integers), got {got}"
        )
    acts: dict[str, Tensor] = {}

    def grab(t: Tensor, hook: Any) -> None:
        acts[hook.name] = t.detach()

    hooks = [*fwd_hooks, *[(name, grab) for name in keep]]
    missing = [n for n, _ in hooks if n not in model.hook_dict]
    if missing:
        raise InterventionError(f"the model has no hook point(s) {sorted(set(missing))}")
    with model.hooks(fwd_hooks=hooks):
        logits = model(x)
    check_targets(y, logits.shape[-1], "y")  # ids of the unembedding, or -1 (masked, as in the model's loss)
    masked = y.eq(-1)
    ce = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none", ignore_index=-1)  # [batch, pos]
    if positions is not None:
        rows = torch.arange(len(ce))
        if bool(masked[rows, positions.to(masked.device)].any()):
            raise InterventionError("positions: a scored position's target is -1 (masked); score one with a target")
        return ce[rows, positions], acts
    if bool(masked.any()):  # the mean over each sequence's unmasked positions (NaN for a row with none)
        return ce.sum(1) / (~masked).sum(1), acts
    return ce.mean(1), acts


__all__ = [
    "HEAD_INTERVENTIONS",
    "LAYER_INTERVENTIONS",
    "InterventionError",
    "ablate_heads",
    "applicable",
    "head_means",
    "knock_out_self",
    "layer_hooks",
    "needs_hook",
    "no_op",
    "patch",
    "per_sequence_loss",
    "remove_attn_residual",
    "remove_ffn_residual",
    "self_only",
    "uniform_pattern",
]
