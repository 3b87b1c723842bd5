"""Token uniformity along the residual stream: how alike the positions of one sequence have become.

Without a skip around attention every position's output is a convex mix of earlier positions' values, so the
stream can drift towards one vector for all positions ("rank collapse": Dong, Cordonnier and Loukas 2021; Noci
et al. 2022). Per sequence X [pos, d_model] at a residual site, averaged over the sequences of the batches:

    residual   ||X - 1 mean_t(X)||_F / ||X||_F   (Dong et al.'s residual from the nearest stream with every
               position equal: 1 = positions as unlike as they can be around a zero mean, 0 = all the same)
    cosine     mean cosine similarity between two different positions (1 = all point one way)
    erank      effective rank of the centred stream X - 1 mean_t(X): exp of the entropy of its singular values
               normalised to sum 1 (Roy and Vetterli 2007); 0 where the centred stream is zero

Sites: interp.reading.stream_layout.resid_sites (the embedding output, each resid_mid and resid_post), read in eval
mode. `qk_grads` adds, per layer, the gradient norm of the loss reaching W_Q and W_K apart from W_V and W_O
(Noci et al. tie collapse at initialisation to vanishing query/key gradients). The hook names are
TransformerLens's, so a HookedTransformer is read as a ResidualGPT is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from einops import reduce
from jaxtyping import Float
from torch import Tensor

from interp.errors import ProcessedWeightsWarning, ShapeError, ToolkitError, warn_each_call
from interp.files.io import non_finite_keys, replace_non_finite
from interp.model.api import as_batch_pairs, check_ids
from interp.model.eval_mode import hooked_passes, unfrozen_in_eval
from interp.reading.stream_layout import resid_sites
from probes import due

MEASURES = ("residual", "cosine", "erank")


def stream_uniformity(x: Float[Tensor, "batch pos d"]) -> dict[str, Float[Tensor, " batch"]]:
    """The module docstring's three measures, one value per sequence (float64)."""
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.is_floating_point() or x.shape[1] < 2:
        got = f"shape {tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ShapeError(f"stream: a float tensor [batch, pos >= 2, d_model] expected, got {got}")
    x = x.detach().double()
    finite = torch.isfinite(x).flatten(1).all(1)  # a diverged stream: NaN measures, not an SVD failure
    x = torch.where(finite[:, None, None], x, torch.zeros_like(x))
    centred = x - reduce(x, "b p d -> b 1 d", "mean")
    total = x.flatten(1).norm(dim=1)
    residual = centred.flatten(1).norm(dim=1) / total.clamp_min(1e-300)
    unit = F.normalize(x, dim=-1)
    gram = unit @ unit.transpose(1, 2)
    n = x.shape[1]
    cosine = (reduce(gram, "b p q -> b", "sum") - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (n * (n - 1))
    s = torch.linalg.svdvals(centred)
    mass = s.sum(-1, keepdim=True)
    p = s / mass.clamp_min(1e-300)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    flat = residual <= 1e-12  # every position the same to rounding: no direction to count
    erank = torch.where(flat, torch.zeros_like(entropy), torch.exp(entropy))
    out = {"residual": residual, "cosine": cosine, "erank": erank}
    return {k: torch.where(finite, v, torch.full_like(v, math.nan)) for k, v in out.items()}


@torch.no_grad()
def token_uniformity(model, batches: Iterable[tuple[Tensor, Tensor]]) -> dict:
    """{"sites", and each of MEASURES: the mean over sequences at each site}, in eval mode.

    "sites" lists the residual sites the model's forward passes through: a TransformerLens attn_only model has no
    resid_mid, and a site never seen is left out (it read 0.0, "every position the same", before)."""
    batches = as_batch_pairs(batches, min_pos=2)
    warn_if_processed(model, "token_uniformity", "the centred stream")
    sums = {s: dict.fromkeys(MEASURES, 0.0) for s in resid_sites(model.cfg.n_layers)}
    seen: set[str] = set()

    def record(resid, hook):
        seen.add(hook.name)
        for k, v in stream_uniformity(resid).items():
            sums[hook.name][k] += v.sum().item()

    count, _ = hooked_passes(model, batches, [(lambda name: name in sums, record)])
    sites = [s for s in sums if s in seen]
    if not sites:
        raise ToolkitError(f"token_uniformity: no residual site ({', '.join(sums)}) ran in {type(model).__name__}")
    return {"sites": sites, **{k: [sums[s][k] / count for s in sites] for k in MEASURES}}


PROCESSED = (
    "{what} on a HookedTransformer whose weights TransformerLens processed (fold_ln / center_writing_weights: the "
    "export's defaults, as from_pretrained's) reads {reads}, not ResidualGPT's: its numbers differ from the same "
    "model's. Export with fold_ln=False, center_writing_weights=False, center_unembed=False for ResidualGPT's"
)


def warn_if_processed(model, what: str, reads: str) -> None:
    """Warn at each call where TL's weight processing changed what this probe reads (the stream centred, or the
    LayerNorm weights folded into W_Q / W_K / W_V)."""
    if not hasattr(model, "W_E") or type(model).__name__ == "ResidualGPT":
        return
    folded = getattr(model.cfg, "normalization_type", None) in ("LNPre", "RMSPre")
    centred = bool(model.W_E.detach().float().mean(-1).abs().max() < 1e-6)  # a trained embedding's rows never are
    if folded or centred:
        warn_each_call(PROCESSED.format(what=what, reads=reads), ProcessedWeightsWarning)


def _attention_weights(model, layer: int) -> dict[str, Tensor] | None:
    """W_Q, W_K, W_V, W_O of one layer as parameters (slices of a fused in_proj are views), or None."""
    attn = model.blocks[layer].attn
    if hasattr(attn, "W_Q"):  # a HookedTransformer
        return {"q": attn.W_Q, "k": attn.W_K, "v": attn.W_V, "o": attn.W_O}
    w_in = getattr(getattr(attn, "in_proj", None), "weight", None)
    if w_in is None or w_in.shape[0] != 3 * model.cfg.d_model:
        return None
    return {"in": w_in, "o": attn.out_proj.weight}


def qk_grads(model, x: Tensor, y: Tensor) -> dict:
    """Per layer, the L2 norm of dLoss/dW for W_Q, W_K, W_V and W_O (one forward/backward in eval mode).

    The loss is the mean next-token cross-entropy of model(x) against y. Nothing is written to .grad; frozen
    weights are measured too (requires_grad is set for the pass and restored).
    A mixer without queries and keys (the position-blind mixer, a fixed pattern) returns {"skipped": why}.
    """
    ((x, y),) = as_batch_pairs([(x, y)])
    check_ids(y, model.cfg.d_vocab, "qk_grads: y")  # cross_entropy's IndexError otherwise
    warn_if_processed(model, "qk_grads", "W_Q / W_K / W_V with the LayerNorm weights folded in")
    mixer = getattr(model.cfg, "mixer", "attention")
    weights = [_attention_weights(model, l) for l in range(model.cfg.n_layers)] if mixer == "attention" else []
    if not weights or any(w is None for w in weights):
        return {"skipped": f"{mixer} mixer has no query/key weights"}
    flat = [p for w in weights for p in w.values()]
    with unfrozen_in_eval(model, flat), torch.enable_grad():  # a frozen weight still has a gradient to measure
        device = next(model.parameters()).device
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten())
        grads = torch.autograd.grad(loss, flat, allow_unused=True)
    # W_V and W_O always reach the loss: no gradient there means these are not the weights the forward used
    # (a TransformerLens 4 bridge rebuilds attn.W_Q... on each access): zeros would be silently wrong
    if any(grads[i] is None for i in _vo_indices(weights)):
        raise ToolkitError(
            f"qk_grads: the loss does not depend on the attention weights read from {type(model).__name__} "
            "(a TransformerLens 4 bridge rebuilds W_Q/W_K/W_V/W_O on each access); measure the ResidualGPT "
            "it wraps, or a TransformerLens 3 export (interp.to_hooked_transformer)"
        )
    out: dict = {k: [] for k in ("q", "k", "v", "o")}
    it = iter(grads)
    d = model.cfg.d_model
    for w in weights:
        g = {name: torch.zeros_like(p) if (v := next(it)) is None else v.detach().double() for name, p in w.items()}
        if "in" in g:  # in_proj rows: [0, d) queries, [d, 2d) keys, [2d, 3d) values
            g = {"q": g["in"][:d], "k": g["in"][d : 2 * d], "v": g["in"][2 * d :], "o": g["o"]}
        for name in out:
            out[name].append(g[name].norm().item())
    out["loss"] = loss.item()
    if not all(math.isfinite(v) for name in ("q", "k", "v", "o") for v in out[name]):
        out["nonfinite"] = True
    return out


def _vo_indices(weights: list[dict[str, Tensor]]) -> list[int]:
    """Positions in the flat weight list of each layer's W_V (or the fused in_proj) and W_O."""
    out, i = [], 0
    for w in weights:
        out += [i + k for k, name in enumerate(w) if name in ("v", "o", "in")]
        i += len(w)
    return out


class UniformityProbe:
    """Trainer callback: token_uniformity and qk_grads on the first fixed validation batches at evaluations.

    Fires every `interval` steps (a multiple of eval_interval) and at the last step; under DDP rank 0 writes
    (is_main), as the other probes do; in an ensemble every member writes its own run directory.
    """

    def __init__(self, interval: int, n_batches: int = 2):
        for name, v in (("interval", interval), ("n_batches", n_batches)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:  # 0: a modulo by zero at the first evaluation
                raise ToolkitError(f"UniformityProbe: {name} must be a positive integer, got {v!r}")
        self.interval = interval
        self.n_batches = n_batches

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if not due(step, self.interval, trainer) or not getattr(trainer, "is_main", True):
            return
        batches = trainer.val_batches[: self.n_batches]
        record = {"step": step, "probe": "uniformity", **token_uniformity(trainer.model, batches)}
        record["grads"] = qk_grads(trainer.model, *batches[0])
        trainer.append("probes.jsonl", finite_record(record))


def finite_record(record: dict) -> dict:
    """The record with every non-finite number as null and "nonfinite" naming where: the run logs strict JSON
    (interp.files.io.dumps refuses NaN) and a diverging stream must not stop the training it is measured on."""
    bad = non_finite_keys(record)
    if not bad:
        return record
    return {**replace_non_finite(record, lambda x: None), "nonfinite": bad}
