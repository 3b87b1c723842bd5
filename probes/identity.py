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
validation tokens (add-one smoothing; interp.reading.levels, as training.reference_levels):

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

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import ToolkitError
from interp.model.api import as_batch_pairs
from interp.model.eval_mode import eval_mode
from interp.reading.levels import add_one_levels
from interp.reading.stream_layout import resid_sites
from probes.softmax_fit import fit_site

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
    """Every distinct residual site (interp.reading.stream_layout.resid_sites), then the final LayerNorm's output."""
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


def probe_windows(tokens: np.ndarray, n_ctx: int, n_train_windows: int, seed: int) -> tuple[Tensor, int]:
    """The decoders' training windows (train_windows) and how many of them, the first, choose the weight decay."""
    n_held = max(1, round(n_train_windows * HELDOUT_FRACTION))
    if n_train_windows - n_held < 1:
        raise IdentityProbeError(f"n_train_windows must be at least 2, got {n_train_windows}")
    return train_windows(tokens, n_ctx, n_train_windows, seed), n_held


def probe_targets(x: Int[Tensor, "batch pos"], offsets: Sequence[int]) -> Int[Tensor, "batch pos offset"]:
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
def _features(model, x: Int[Tensor, "batch pos"], probe: ProbePlan) -> dict[str, Tensor]:
    """Site activations plus the control (where the probe has it): the current token one-hot, decoded by the same
    procedure."""
    acts = _activations(model, x, probe.sites)
    if probe.control:
        acts[CONTROL] = F.one_hot(x.reshape(-1), probe.n_classes).float()
    return acts


def _activations(model, x: Int[Tensor, "batch pos"], sites: Sequence[str]) -> dict[str, Float[Tensor, "n d"]]:
    acts: dict[str, Tensor] = {}

    def keep(t, hook):
        acts[hook.name] = t.detach().float().reshape(-1, t.shape[-1])

    with model.hooks(fwd_hooks=[(lambda name: name in sites, keep)]):
        model(x.to(next(model.parameters()).device))
    if missing := [s for s in sites if s not in acts]:
        raise IdentityProbeError(f"the model has no hook point(s) {missing}")
    return {s: acts[s].cpu() for s in sites}


# --------------------------------------------------------------------------- reference levels


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
            f"a vocabulary of {cfg.d_vocab} tokens needs about {c['flops']:.1e} FLOPs and {c['bytes'] / 2**30:.1f} GiB "
            f"for the decoders (limits {MAX_FLOPS:.0e} FLOPs, {MAX_BYTES / 2**30:.0f} GiB)"
        )
    return None


# --------------------------------------------------------------------------- measure


def probe_model(checkpoint_or_model: Any):
    from interp.files.checkpoint import Checkpoint
    from interp.model.gpt import ResidualGPT

    if isinstance(checkpoint_or_model, (str, Path, Checkpoint)):
        return ResidualGPT.from_checkpoint(checkpoint_or_model)
    return checkpoint_or_model


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
    model = probe_model(checkpoint_or_model)
    cfg = model.cfg
    offsets = list(offsets)
    sites = _checked_sites(cfg, offsets, sites)
    val = [x for x, _ in as_batch_pairs(val_batches, "val_batches")]
    train_tokens = np.asarray(train_tokens)
    windows, n_held = probe_windows(train_tokens, cfg.n_ctx, n_train_windows, seed)
    probe = ProbePlan(sites, offsets, cfg.d_vocab)
    with eval_on_one_thread(model):
        decoders, y_fit, y_held = fit_site_decoders(model, probe, windows, n_held, weight_decays, max_iter, progress)
        tally = _score(model, probe, decoders, val)
    accuracy, ce = (tally.correct / tally.counts).tolist(), (tally.nll / tally.counts).tolist()
    return {
        "sites": sites,
        "labels": [site_label(s) for s in sites],
        "offsets": offsets,
        "accuracy": accuracy[:-1],
        "ce": ce[:-1],
        "weight_decay": [decoders[s][4] for s in sites],
        "control": {"accuracy": accuracy[-1], "ce": ce[-1], "weight_decay": decoders[CONTROL][4]},
        "levels": _counted_levels(train_tokens, probe, tally),
        "n_fit": int((y_fit >= 0).sum(0).min()),
        "n_heldout": int((y_held >= 0).sum(0).min()),
        "n_val": tally.counts.astype(int).tolist(),
    }


def _checked_sites(cfg, offsets: list[int], sites: Sequence[str] | None) -> list[str]:
    """The sites to probe (default: every identity site), once the offsets are known to fit in the context."""
    if cfg.n_ctx <= max(-k for k in offsets):
        raise IdentityProbeError(
            f"offsets {offsets} need n_ctx > {max(-k for k in offsets)}, the model has {cfg.n_ctx}"
        )
    every = identity_sites(cfg.n_layers)
    chosen = every if sites is None else list(sites)
    unknown = [s for s in chosen if s not in every]
    if unknown or not chosen:
        raise IdentityProbeError(
            f"sites {unknown or chosen} are not residual sites of this model; choose from {', '.join(every)}"
        )
    return chosen


@dataclass(frozen=True)
class ProbePlan:
    """What is decoded where: the residual sites (the control is decoded after them, unless control=False),
    offsets, vocabulary size."""

    sites: list[str]
    offsets: list[int]
    n_classes: int
    control: bool = True

    @property
    def decoded(self) -> list[str]:
        return [*self.sites, CONTROL] if self.control else list(self.sites)


@contextlib.contextmanager
def eval_on_one_thread(model):
    """The model in eval mode on one intra-op thread; its training flag and the thread count restored after."""
    threads = torch.get_num_threads()
    # One intra-op thread: these matmuls are small, and on a shared CPU the threads' synchronisation cost more
    # than they saved (cpu-quick: 91 s with 2 threads, 22 s with 1, at load 8 on 2 cores; same numbers).
    torch.set_num_threads(1)
    try:
        with eval_mode(model):
            yield
    finally:
        torch.set_num_threads(threads)


def fit_site_decoders(
    model, probe: ProbePlan, windows: Tensor, n_held: int, weight_decays, max_iter: int, progress: Any
) -> tuple[dict[str, tuple], Tensor, Tensor]:
    """Every decoder (fit_site's tuple per site and the control), fitted on windows[n_held:] with the weight decay
    chosen on windows[:n_held]; and the fitted and held-out targets [rows, offset]."""
    fit_x, held_x = windows[n_held:], windows[:n_held]
    fit_acts, held_acts = _features(model, fit_x, probe), _features(model, held_x, probe)
    y_fit = probe_targets(fit_x, probe.offsets).reshape(-1, len(probe.offsets))
    y_held = probe_targets(held_x, probe.offsets).reshape(-1, len(probe.offsets))
    decoders = {}
    for site in probe.decoded:
        decoders[site] = fit_site(
            fit_acts[site], held_acts[site], y_fit, y_held, probe.n_classes, weight_decays, max_iter
        )
        if progress is not None:  # progress(label): one call per fitted site
            progress(site_label(site) if site != CONTROL else "control")
    return decoders, y_fit, y_held


@dataclass
class _Tally:
    """The validation tokens scored: per decoder (the control last) and offset, correct argmaxes and summed
    cross-entropy; per offset, tokens scored and the (current, target) pairs the counted levels are read on."""

    correct: np.ndarray
    nll: np.ndarray
    counts: np.ndarray
    current: list[list[np.ndarray]]
    target: list[list[np.ndarray]]

    @classmethod
    def empty(cls, n_decoders: int, n_offsets: int) -> _Tally:
        return cls(
            np.zeros((n_decoders, n_offsets)),
            np.zeros((n_decoders, n_offsets)),
            np.zeros(n_offsets),
            [[] for _ in range(n_offsets)],
            [[] for _ in range(n_offsets)],
        )


def _score(model, probe: ProbePlan, decoders: dict[str, tuple], val: list[Tensor]) -> _Tally:
    """Every decoder on the validation batches, one batch at a time."""
    n_off = len(probe.offsets)
    tally = _Tally.empty(len(probe.decoded), n_off)
    for x in val:
        x = x.cpu()
        acts = _features(model, x, probe)
        y = probe_targets(x, probe.offsets).reshape(-1, n_off)
        for j in range(n_off):
            valid = y[:, j] >= 0
            tally.counts[j] += int(valid.sum())
            tally.current[j].append(x.reshape(-1)[valid].numpy())
            tally.target[j].append(y[valid, j].numpy())
        for i, site in enumerate(probe.decoded):
            mean, std, w, b, _ = decoders[site]
            z = (acts[site] - mean) / std
            for j in range(n_off):
                valid = y[:, j] >= 0
                logits = z[valid] @ w[j] + b[j]
                tally.correct[i, j] += int((logits.argmax(-1) == y[valid, j]).sum())
                tally.nll[i, j] += float(F.cross_entropy(logits, y[valid, j], reduction="sum"))
    return tally


def _counted_levels(train_tokens: np.ndarray, probe: ProbePlan, tally: _Tally) -> dict[str, dict[str, list[float]]]:
    """The unigram and current-token levels per offset, counted on train and scored on the tokens the decoders
    were."""
    levels = {name: {"accuracy": [], "ce": []} for name in ("unigram", "current_token")}
    for j, k in enumerate(probe.offsets):
        current, target = np.concatenate(tally.current[j]), np.concatenate(tally.target[j])
        lv = _levels(train_tokens, current, target, k, probe.n_classes)
        for name in levels:
            for stat in ("accuracy", "ce"):
                levels[name][stat].append(lv[name][stat])
    return levels


def identity_summary(checkpoint_or_model: Any, train_tokens: np.ndarray, val_batches, **kwargs) -> dict[str, Any]:
    """For a finished run: {"identity": measure_identity(...), "logit_lens": {"sites", "layers", "ce"}}.

    The logit lens is interp.reading.decompose.logit_lens_over on the same validation batches.
    """
    from interp.reading.decompose import logit_lens_over

    model = probe_model(checkpoint_or_model)
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
