"""Attention statistics from `blocks.{l}.attn.hook_pattern`: alpha_tt and friends.

alpha_tt is the weight a query puts on its own position. It is averaged over
batch and positions t >= 1 (at t = 0 the causal mask forces it to 1) and
reported beside the uniform baseline mean(1/(t+1)) over the same positions, so
"self-focused" is a ratio, not a guess. The hook names are TransformerLens's,
so these functions read a HookedTransformer as well as a ResidualGPT.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from jaxtyping import Float
from torch import Tensor

from interp.config.registry import mixer_spec
from interp.errors import ShapeError, ToolkitError
from interp.model.api import as_batch_pairs, check_materialised
from interp.model.eval_mode import hooked_passes

STATS = ("alpha_tt", "prev_token", "entropy", "distance")


def uniform_baseline(n_ctx: int) -> float:
    """alpha_tt of uniform causal attention, mean over t >= 1 of 1/(t+1)."""
    t = torch.arange(1, n_ctx, dtype=torch.float64)
    return float((1.0 / (t + 1)).mean())


def pattern_stats(pattern: Float[Tensor, "batch head q k"]) -> dict[str, Float[Tensor, " head"]]:
    """Per-head means over batch and query positions t >= 1."""
    if not isinstance(pattern, Tensor) or pattern.dim() != 4 or not pattern.is_floating_point():
        got = f"shape {tuple(pattern.shape)} {pattern.dtype}" if isinstance(pattern, Tensor) else type(pattern).__name__
        raise ShapeError(f"pattern: a float tensor [batch, head, q, k] (hook_pattern), got {got}")
    if pattern.shape[-1] != pattern.shape[-2] or pattern.shape[-1] < 2:
        raise ShapeError(
            f"pattern: square [q, k] with at least 2 positions (alpha_tt is read at t >= 1), got {tuple(pattern.shape)}"
        )
    p = pattern.detach().double()[:, :, 1:, :]  # drop t = 0
    n = pattern.shape[-1]
    t = torch.arange(1, n, device=p.device)
    k = torch.arange(n, device=p.device)
    diag = p.diagonal(offset=1, dim1=-2, dim2=-1)  # row i is t = i + 1, so p[t, t] sits one right
    prev = p.diagonal(offset=0, dim1=-2, dim2=-1)  # p[t, t - 1]
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    distance = (p * (t[:, None] - k[None, :]).clamp_min(0)).sum(-1)
    return {name: stat.mean((0, 2)) for name, stat in zip(STATS, (diag, prev, entropy, distance), strict=True)}


@torch.no_grad()
def attention_stats(model, batches: Iterable[tuple[Tensor, Tensor]]) -> dict:
    """alpha_tt, previous-token weight, entropy and mean attended distance per layer and head.

    Runs the model in eval mode over the batches with hooks on every hook_pattern
    (removed afterwards, even on error). A mixer without a pattern (it declares
    has_pattern False, e.g. position_blind): the result then says so in "skipped".
    A mixer that declares a pattern but fills no hook_pattern is refused by name.
    Batches of different lengths: every (sequence, query position t >= 1) counts once, and uniform_baseline is
    the mean of 1/(t+1) over those same positions.
    """
    batches = as_batch_pairs(batches)
    check_materialised(model, "model")
    mixer = getattr(model.cfg, "mixer", "attention")  # a HookedTransformer has attention
    if not mixer_spec(mixer).has_pattern:
        return {"skipped": f"{mixer} mixer has no attention pattern"}
    # Summed per (layer, sequence length): batches of one length weigh by their sequences, and lengths weigh by
    # their query positions t >= 1, so each (sequence, t) counts once and the baseline is over the same positions.
    sums: dict[int, dict[int, dict[str, Tensor]]] = {}
    counts: dict[int, dict[int, int]] = {}

    def record(pattern, hook):
        layer, n = int(hook.name.split(".")[1]), pattern.shape[-1]
        stats = pattern_stats(pattern)
        acc = sums.setdefault(layer, {}).setdefault(n, {k: torch.zeros_like(v) for k, v in stats.items()})
        for k, v in stats.items():
            acc[k] += v * pattern.shape[0]
        counts.setdefault(layer, {})[n] = counts.get(layer, {}).get(n, 0) + pattern.shape[0]

    names = [name for name in model.hook_dict if name.endswith("attn.hook_pattern")]
    hooked_passes(model, batches if names else (), [(name, record) for name in names])  # none: refused below
    layers = sorted(sums)
    if len(layers) != model.cfg.n_layers:  # declared, not delivered: no silent empty stats
        raise ToolkitError(
            f"mixer {mixer!r} declares has_pattern=True but filled blocks.{{l}}.attn.hook_pattern in "
            f"{len(layers)} of {model.cfg.n_layers} layers; fill hook_pattern in its forward when hooked, "
            "or declare has_pattern=False"
        )
    weights = {n: c * (n - 1) for n, c in counts[layers[0]].items()}  # query positions t >= 1 of each length
    total = sum(weights.values())

    def mean(layer: int, k: str) -> list[float]:
        by_n = {n: sums[layer][n][k] / counts[layer][n] for n in weights}
        if len(by_n) == 1:  # one length (training's probes): each sequence's mean, as it always was
            return next(iter(by_n.values())).tolist()
        return sum(v * (weights[n] / total) for n, v in by_n.items()).tolist()

    out = {k: [mean(l, k) for l in layers] for k in STATS}
    out["alpha_tt_layer_mean"] = [sum(row) / len(row) for row in out["alpha_tt"]]
    baselines = {n: uniform_baseline(n) for n in weights}
    out["uniform_baseline"] = (
        next(iter(baselines.values()))
        if len(baselines) == 1
        else sum(b * weights[n] / total for n, b in baselines.items())
    )
    out["alpha_tt_ratio"] = [a / out["uniform_baseline"] for a in out["alpha_tt_layer_mean"]]
    return out
