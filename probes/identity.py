"""Token-identity probes: where in the residual stream is the current token (and the ones before it)?

What this measures: at every residual site - the embedding output (token +
position), each block's resid_mid and resid_post (a block's resid_pre is the
previous resid_post), and ln_final.hook_normalized - a linear multinomial
logistic-regression decoder for the token at offset 0 (the current token), -1
and -2. Decoders are fitted on activations of fixed training windows (drawn from
the train split with a seed of their own), their L2 weight decay is chosen per
site and offset on held-out windows of that training set, and accuracy and
cross-entropy are reported on the fixed validation batches only: no decoder
sees the data it is scored on.

Two levels frame every number, counted on the train split, scored on the same
validation tokens (add-one smoothing; interp.levels, as training.reference_levels):

    unigram        chance: predict the token from its frequency alone
    current_token  predict the token at offset k from the current token alone
                   (offset 0: exact; -1: the reverse bigram; -2: the reverse skip-bigram).
                   A site that holds only the current token reaches this level and
                   no more; above it, cross-position information is present.

and a control decoder ("control"): the same fit, on the same windows, of the
current token one-hot. It is the current-token level as reachable by this
probe from this much data (the counted level uses the whole train split), so a
site is compared with it to ask "more than the current token?" without the
sample-size handicap.

Features are standardised per site (train-split mean and std), so one weight
decay grid serves every site and wiring. The fit is full-batch L-BFGS, from
zero, along the grid from strong to weak decay (each fit starts at the
previous solution), on one CPU thread, deterministic for a given machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.checks.api import as_batch_pairs
from interp.errors import ToolkitError
from interp.levels import add_one_levels
from interp.stream_layout import resid_sites

OFFSETS = (0, -1, -2)
WEIGHT_DECAYS = (1e-2, 1e-3, 1e-4)  # per-sample L2 on the standardised weights, strong to weak
TRAIN_SEED = 424242  # the probes' own training windows, independent of the trainer's sampler
N_TRAIN_WINDOWS = 64  # windows of n_ctx tokens; HELDOUT_FRACTION of them choose the weight decay
HELDOUT_FRACTION = 0.25
CONTROL = "control.current_token_onehot"
MAX_ITER = 12  # L-BFGS iterations per weight decay (warm-started along the grid)


class IdentityProbeError(ToolkitError, ValueError):
    """Bad input to the identity probes (too little data, an offset after the current token, ...)."""


# --------------------------------------------------------------------------- sites and data


def identity_sites(n_layers: int) -> list[str]:
    """Every distinct residual site (interp.stream_layout.resid_sites), then the final LayerNorm's output."""
    return [*resid_sites(n_layers), "ln_final.hook_normalized"]


def site_label(site: str) -> str:
    """Short axis labels: embed, 0.mid, 0.post, ..., ln_final."""
    if site == "blocks.0.hook_resid_pre":
        return "embed"
    if site.startswith("ln_final"):
        return "ln_final"
    _, layer, hook = site.split(".")
    return f"{layer}.{hook.removeprefix('hook_resid_')}"


def train_windows(
    tokens: np.ndarray, n_ctx: int, n_windows: int = N_TRAIN_WINDOWS, seed: int = TRAIN_SEED
) -> Int[Tensor, "window pos"]:
    """n_windows random windows of n_ctx tokens from a token array, from a generator seeded `seed`."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) <= n_ctx:
        raise IdentityProbeError(
            f"train_tokens: need a 1-D token array longer than n_ctx={n_ctx}, got shape {tokens.shape}"
        )
    if not np.issubdtype(tokens.dtype, np.integer):  # floats would be cut to ids (0.37 -> 0) without a word
        raise IdentityProbeError(f"train_tokens: token ids must be integers, got a {tokens.dtype} array")
    starts = torch.randint(len(tokens) - n_ctx, (n_windows,), generator=torch.Generator().manual_seed(seed))
    return torch.from_numpy(np.stack([np.asarray(tokens[s : s + n_ctx], dtype=np.int64) for s in starts.tolist()]))


def _targets(x: Int[Tensor, "batch pos"], offsets: Sequence[int]) -> Int[Tensor, "batch pos offset"]:
    """The token at t + k for each offset k; -100 (ignored) where t + k falls before the window."""
    cols = []
    for k in offsets:
        if k > 0:
            raise IdentityProbeError(f"offsets must be <= 0 (the current token or earlier), got {k}")
        shifted = torch.full_like(x, -100)
        shifted[:, -k:] = x[:, : x.shape[1] + k]
        cols.append(shifted)
    return torch.stack(cols, dim=-1)


@torch.no_grad()
def _features(model, x: Int[Tensor, "batch pos"], sites: Sequence[str], n_classes: int) -> dict[str, Tensor]:
    """Site activations plus the control: the current token one-hot, decoded by the same procedure."""
    acts = _activations(model, x, sites)
    acts[CONTROL] = F.one_hot(x.reshape(-1), n_classes).float()
    return acts


def _activations(model, x: Int[Tensor, "batch pos"], sites: Sequence[str]) -> dict[str, Float[Tensor, "n d"]]:
    acts: dict[str, Tensor] = {}

    def keep(t, hook):
        acts[hook.name] = t.detach().float().reshape(-1, t.shape[-1])

    with model.hooks(fwd_hooks=[(lambda name: name in sites, keep)]):
        model(x.to(next(model.parameters()).device))
    missing = [s for s in sites if s not in acts]
    if missing:
        raise IdentityProbeError(f"the model has no hook point(s) {missing}")
    return {s: acts[s].cpu() for s in sites}


# --------------------------------------------------------------------------- the decoders


def _fit(
    x_fit: Float[Tensor, "n d"],
    y_fit: Int[Tensor, "n offset"],
    x_held: Float[Tensor, "m d"],
    y_held: Int[Tensor, "m offset"],
    n_classes: int,
    weight_decays: Sequence[float],
    max_iter: int,
) -> tuple[Tensor, Tensor, list[float]]:
    """One softmax decoder per offset, decay chosen per offset on the held-out rows.

    The offsets are fitted jointly (one matmul; the problems are independent, so
    the joint optimum is each one's optimum); the loss is the mean cross-entropy
    per offset plus decay/2 |W|^2, its gradient written out (no autograd: a
    third of the time). Returns W [offset, d, class], b [offset, class], decays.
    """
    n_off, d = y_fit.shape[1], x_fit.shape[1]
    x1 = torch.cat([x_fit, torch.ones(len(x_fit), 1)], 1)
    x1_t = x1.T.contiguous()
    valid = y_fit >= 0
    index = y_fit.clamp_min(0)[..., None]
    row_weight = (valid.float() / valid.sum(0).clamp_min(1))[..., None]  # mean per offset; 0 where invalid
    theta = torch.zeros(d + 1, n_off * n_classes)  # last row: the biases
    best: list[tuple[float, Tensor | None, float]] = [(math.inf, None, 0.0)] * n_off
    for decay in weight_decays:  # strong to weak, each fit starting from the last

        def closure(decay=decay):
            log_p = torch.log_softmax((x1 @ theta).view(len(x1), n_off, n_classes), -1)
            loss = -(log_p.gather(-1, index) * row_weight).sum() + 0.5 * decay * theta[:-1].pow(2).sum()
            g = log_p.exp_().scatter_add_(-1, index, torch.full_like(row_weight, -1.0)).mul_(row_weight)
            grad = x1_t @ g.view(len(x1), -1)
            grad[:-1] += decay * theta[:-1]
            theta.grad = grad
            return loss

        opt = torch.optim.LBFGS(
            [theta],
            lr=1.0,
            max_iter=max_iter,
            history_size=10,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-6,
            tolerance_change=1e-9,
        )
        opt.step(closure)
        logits = (x_held @ theta[:-1] + theta[-1]).view(len(x_held), n_off, n_classes)
        for k in range(n_off):
            held = float(F.cross_entropy(logits[:, k], y_held[:, k], ignore_index=-100))
            if best[k][1] is None or held < best[k][0]:  # a NaN held-out loss keeps the first fit, not None
                best[k] = (held, theta.view(d + 1, n_off, n_classes)[:, k].clone(), decay)
    w = torch.stack([t[:-1] for _, t, _ in best])
    b = torch.stack([t[-1] for _, t, _ in best])
    return w, b, [decay for *_, decay in best]


# --------------------------------------------------------------------------- reference levels


def fit_site(
    fit_acts: Tensor, held_acts: Tensor, y_fit: Tensor, y_held: Tensor, n_classes: int, weight_decays, max_iter: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, float]:
    """One site's decoder on standardised activations: (mean, std, W, b, the weight decay chosen on held)."""
    mean, std = fit_acts.mean(0), fit_acts.std(0)
    std = torch.where(std > 1e-6 * max(float(std.max()), 1e-30), std, torch.ones_like(std))  # constant features
    w, b, decay = _fit(
        (fit_acts - mean) / std, y_fit, (held_acts - mean) / std, y_held, n_classes, weight_decays, max_iter
    )
    return mean, std, w, b, decay


def _pairs(tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(current, token at offset k) for every position of a 1-D array where both exist."""
    return (tokens[-k:], tokens[: len(tokens) + k]) if k else (tokens, tokens)


def _levels(train_tokens: np.ndarray, current: np.ndarray, target: np.ndarray, k: int, n_classes: int) -> dict:
    """Unigram and current-token levels (accuracy, CE) of `target` given `current`, counted on train."""
    train_tokens = np.asarray(train_tokens, dtype=np.int64)
    pairs = _pairs(train_tokens, k) if k else None
    lv = add_one_levels(train_tokens, current, target, n_classes, pairs=pairs, accuracy=True)
    current_token = lv["pair"] if k else {"accuracy": 1.0, "ce": 0.0}  # offset 0: the current token itself
    return {"unigram": lv["unigram"], "current_token": current_token}


# --------------------------------------------------------------------------- cost

MAX_FLOPS = 2e12  # about two minutes of one CPU thread; cpu-quick's probes cost ~3e11
MAX_BYTES = 2 * 2**30  # the decoders' parameters and logits, the one-hot control's included


def cost(
    cfg,
    n_train_windows: int = N_TRAIN_WINDOWS,
    weight_decays: Sequence[float] = WEIGHT_DECAYS,
    max_iter: int = MAX_ITER,
    offsets: Sequence[int] = OFFSETS,
) -> dict[str, float]:
    """Rough FLOPs and peak bytes of measure_identity() on a model of this config.

    Every site's decoder is a [d + 1, offsets x d_vocab] matrix fitted by L-BFGS on n_fit rows (each
    evaluation a forward and a gradient matmul); the control's d is d_vocab itself, so the cost grows as
    d_vocab^2 and a BPE vocabulary (50257) would need ~10^16 FLOPs and 30 GB for the control alone.
    """
    v, n_off = cfg.d_vocab, len(offsets)
    n_fit = (n_train_windows - max(1, round(n_train_windows * HELDOUT_FRACTION))) * cfg.n_ctx
    widths = [cfg.d_model + 1] * (len(identity_sites(cfg.n_layers))) + [v + 1]
    evals = len(weight_decays) * max_iter * 1.25  # strong-Wolfe line search: a few more evaluations than steps
    flops = evals * sum(4 * n_fit * w * n_off * v for w in widths)
    peak = 4 * ((v + 1) * n_off * v * 3 + n_fit * (v + 1) + 2 * n_fit * n_off * v)  # control: theta, grad, history
    return {"flops": flops, "bytes": peak}


def too_costly(cfg, **kwargs: Any) -> str | None:
    """Why measure_identity() would take too long or too much memory on this config (None: it will not)."""
    c = cost(cfg, **kwargs)
    if c["flops"] > MAX_FLOPS or c["bytes"] > MAX_BYTES:
        return (
            f"a vocabulary of {cfg.d_vocab} tokens needs about {c['flops']:.1e} FLOPs and "
            f"{c['bytes'] / 2**30:.1f} GiB for the decoders (limits {MAX_FLOPS:.0e} FLOPs, "
            f"{MAX_BYTES / 2**30:.0f} GiB)"
        )
    return None


# --------------------------------------------------------------------------- measure


def _as_model(checkpoint_or_model: Any):
    from interp.checkpoint import Checkpoint
    from interp.model import ResidualGPT

    model = checkpoint_or_model
    if isinstance(model, (str, Path, Checkpoint)):
        model = ResidualGPT.from_checkpoint(model)
    return model


def measure_identity(
    checkpoint_or_model: Any,
    train_tokens: np.ndarray,
    val_batches: Iterable[tuple[Tensor, Tensor]],
    *,
    offsets: Sequence[int] = OFFSETS,
    n_train_windows: int = N_TRAIN_WINDOWS,
    weight_decays: Sequence[float] = WEIGHT_DECAYS,
    max_iter: int = MAX_ITER,
    seed: int = TRAIN_SEED,
    progress: Any = None,
    sites: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Identity probes on a model, Checkpoint or checkpoint path.

    train_tokens: the train split (1-D token ids) - decoders are fitted on
    n_train_windows windows of it and the levels are counted on all of it;
    val_batches: the fixed validation batches (x, y), where everything is scored;
    sites: a subset of identity_sites(n_layers) to probe (default: all of them), e.g. one site
    read often during training at a fraction of the cost.

    Returns {"sites", "labels", "offsets", "accuracy", "ce", "weight_decay"
    ([site][offset] each), "levels": {"unigram", "current_token"} ->
    {"accuracy", "ce"} (one per offset), "control": {"accuracy", "ce", "weight_decay"}
    (one per offset), "n_fit", "n_heldout", "n_val" (tokens per offset)}.
    """
    model = _as_model(checkpoint_or_model)
    cfg = model.cfg
    n_classes, n_ctx = cfg.d_vocab, cfg.n_ctx
    offsets = list(offsets)
    if n_ctx <= max(-k for k in offsets):
        raise IdentityProbeError(f"offsets {offsets} need n_ctx > {max(-k for k in offsets)}, the model has {n_ctx}")
    every = identity_sites(cfg.n_layers)
    sites = every if sites is None else list(sites)
    unknown = [s for s in sites if s not in every]
    if unknown or not sites:
        raise IdentityProbeError(
            f"sites {unknown or sites} are not residual sites of this model; choose from {', '.join(every)}"
        )
    val = [x for x, _ in as_batch_pairs(val_batches, "val_batches")]
    train_tokens = np.asarray(train_tokens)
    n_held = max(1, round(n_train_windows * HELDOUT_FRACTION))
    if n_train_windows - n_held < 1:
        raise IdentityProbeError(f"n_train_windows must be at least 2, got {n_train_windows}")
    windows = train_windows(train_tokens, n_ctx, n_train_windows, seed)
    fit_x, held_x = windows[n_held:], windows[:n_held]

    was_training = model.training
    threads = torch.get_num_threads()
    # One intra-op thread: these matmuls are small, and on a shared CPU the threads' synchronisation cost more
    # than they saved (cpu-quick: 91 s with 2 threads, 22 s with 1, at load 8 on 2 cores; same numbers).
    torch.set_num_threads(1)
    model.eval()
    try:
        fit_acts = _features(model, fit_x, sites, n_classes)
        held_acts = _features(model, held_x, sites, n_classes)
        y_fit = _targets(fit_x, offsets).reshape(-1, len(offsets))
        y_held = _targets(held_x, offsets).reshape(-1, len(offsets))
        decoders = {}
        for site in [*sites, CONTROL]:
            decoders[site] = fit_site(
                fit_acts[site], held_acts[site], y_fit, y_held, n_classes, weight_decays, max_iter
            )
            if progress is not None:  # progress(label): one call per fitted site
                progress(site_label(site) if site != CONTROL else "control")
        # score on the validation batches, one batch at a time
        correct = np.zeros((len(sites) + 1, len(offsets)))  # the last row: the one-hot control
        nll = np.zeros((len(sites) + 1, len(offsets)))
        counts = np.zeros(len(offsets))
        current_all, target_all = [[] for _ in offsets], [[] for _ in offsets]
        for x in val:
            x = x.cpu()
            acts = _features(model, x, sites, n_classes)
            y = _targets(x, offsets).reshape(-1, len(offsets))
            for j in range(len(offsets)):
                valid = y[:, j] >= 0
                counts[j] += int(valid.sum())
                current_all[j].append(x.reshape(-1)[valid].numpy())
                target_all[j].append(y[valid, j].numpy())
            for i, site in enumerate([*sites, CONTROL]):
                mean, std, w, b, _ = decoders[site]
                z = (acts[site] - mean) / std
                for j in range(len(offsets)):
                    valid = y[:, j] >= 0
                    logits = z[valid] @ w[j] + b[j]
                    correct[i, j] += int((logits.argmax(-1) == y[valid, j]).sum())
                    nll[i, j] += float(F.cross_entropy(logits, y[valid, j], reduction="sum"))
    finally:
        model.train(was_training)
        torch.set_num_threads(threads)

    levels: dict[str, dict[str, list[float]]] = {
        "unigram": {"accuracy": [], "ce": []},
        "current_token": {"accuracy": [], "ce": []},
    }
    for j, k in enumerate(offsets):
        lv = _levels(train_tokens, np.concatenate(current_all[j]), np.concatenate(target_all[j]), k, n_classes)
        for name in levels:
            for stat in ("accuracy", "ce"):
                levels[name][stat].append(lv[name][stat])
    accuracy, ce = (correct / counts).tolist(), (nll / counts).tolist()
    return {
        "sites": sites,
        "labels": [site_label(s) for s in sites],
        "offsets": offsets,
        "accuracy": accuracy[:-1],
        "ce": ce[:-1],
        "weight_decay": [decoders[s][4] for s in sites],
        "control": {"accuracy": accuracy[-1], "ce": ce[-1], "weight_decay": decoders[CONTROL][4]},
        "levels": levels,
        "n_fit": int((y_fit >= 0).sum(0).min()),
        "n_heldout": int((y_held >= 0).sum(0).min()),
        "n_val": counts.astype(int).tolist(),
    }


def identity_summary(checkpoint_or_model: Any, train_tokens: np.ndarray, val_batches, **kwargs) -> dict[str, Any]:
    """For a finished run: {"identity": measure_identity(...), "logit_lens": {"sites", "layers", "ce"}}.

    The logit lens is interp.decompose.logit_lens_over on the same validation batches.
    """
    from interp.decompose import logit_lens_over

    model = _as_model(checkpoint_or_model)
    val_batches = list(val_batches)
    return {
        "identity": measure_identity(model, train_tokens, val_batches, **kwargs),
        "logit_lens": logit_lens_over(model, val_batches),
    }


# --------------------------------------------------------------------------- trainer callback


class IdentityProbe:
    """Identity probes at the end of training (and every `interval` steps at evaluations; 0: off).

    Writes {"step", "probe": "identity", ...measure_identity()...} to probes.jsonl. Uses the
    trainer's model, train split (trainer.corpus.train) and fixed validation
    batches (the first n_val_batches of them; None: all).
    """

    def __init__(self, interval: int = 0, n_val_batches: int | None = None, **measure_kwargs: Any):
        self.interval = interval
        self.n_val_batches = n_val_batches
        self.measure_kwargs = measure_kwargs

    def _record(self, trainer, step: int) -> None:
        if not getattr(trainer, "is_main", True):
            return
        batches = trainer.val_batches if self.n_val_batches is None else trainer.val_batches[: self.n_val_batches]
        result = measure_identity(trainer.model, trainer.corpus.train, batches, **self.measure_kwargs)
        trainer.append("probes.jsonl", {"step": step, "probe": "identity", **result})

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if self.interval and step % self.interval == 0 and step < trainer.train_cfg.max_steps:
            self._record(trainer, step)

    def on_train_end(self, trainer) -> None:
        self._record(trainer, trainer.train_cfg.max_steps)


__all__ = [
    "OFFSETS",
    "IdentityProbe",
    "IdentityProbeError",
    "cost",
    "identity_sites",
    "identity_summary",
    "measure_identity",
    "site_label",
    "too_costly",
    "train_windows",
]
