"""What the interventions experiment measures on one trained model, and the intervals around it.

measure_model runs every intervention of interp.reading.interventions on a model over the fixed validation
batches and keeps per-sequence numbers (raw: numpy arrays, never written); summarise turns raw
numbers - one run's, or the mean over seeds of a variant's, which share the validation sequences -
into effects with percentile bootstrap intervals over validation sequences (one seeded index
matrix, so every interval resamples the same sequences). sanity_checks reads the raw numbers for
the checks that each intervention does what it says; export_difference runs the same hooks on the
model and its TransformerLens export.

Previous-token activation patching (denoising): each sequence is cut after position T (--patch-pos),
its token at T - 1 is resampled from the train unigram distribution (never the original token;
seeded), and the clean run's activation at T is patched into the corrupted run, one site (per layer:
attn_out, resid_post; per head: hook_z) at a time. The effect is the fraction of the clean-vs-corrupt
loss at T that the patch restores, (corrupt - patched) / (corrupt - clean). Denoising, because the
question is whether a site at T is *enough* to carry the previous token there (where the routing
hypothesis says it arrives); noising (clean run, corrupt patch) would measure necessity, which
redundant heads hide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from experiments.shared.places import place  # None: no full comparison
from interp.config.model_config import ModelConfig
from interp.reading import interventions as iv

BOOTSTRAP = 1000  # resamples of the validation sequences
BOOTSTRAP_SEED = 20240  # the index matrix's generator
CORRUPT_SEED = 31337  # the resampled previous tokens
LEVEL = 0.95  # interval coverage
PATCH_SITES = ("attn_out", "resid_post")


def bootstrap_index(n: int, resamples: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """[resamples, n] indices of validation sequences drawn with replacement (one generator, seeded)."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def interval(values: np.ndarray, idx: np.ndarray) -> dict[str, float]:
    """Mean of per-sequence values and its percentile bootstrap interval."""
    values = np.asarray(values, dtype=float)
    boot = values[idx].mean(1)
    lo, hi = np.quantile(boot, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"mean": float(values.mean()), "lo": float(lo), "hi": float(hi)}


def ratio_interval(num: np.ndarray, den: np.ndarray, idx: np.ndarray) -> dict[str, float] | None:
    """mean(num) / mean(den) with a bootstrap interval (None where the denominator is about 0)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if abs(den.mean()) < 1e-6:
        return None
    boot_den = den[idx].mean(1)
    boot = num[idx].mean(1) / np.where(np.abs(boot_den) < 1e-12, np.nan, boot_den)
    lo, hi = np.nanquantile(boot, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"mean": float(num.mean() / den.mean()), "lo": float(lo), "hi": float(hi)}


# ----- measuring one model -------------------------------------------------------------------------------


def corrupt_previous(x: torch.Tensor, pos: int, unigram: np.ndarray, seed: int = CORRUPT_SEED) -> torch.Tensor:
    """x with the token at pos - 1 of every row drawn from the unigram distribution, never the original."""
    probs = torch.as_tensor(unigram, dtype=torch.float64).expand(len(x), -1).clone()
    probs[torch.arange(len(x)), x[:, pos - 1]] = 0.0
    out = x.clone()
    out[:, pos - 1] = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
    return out


def _cat(chunks: list[torch.Tensor]) -> np.ndarray:
    return torch.cat(chunks).double().numpy()


def measure_model(
    model,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    decoders=None,
    patch_pos: int,
    unigram: np.ndarray,
    corrupt_seed: int = CORRUPT_SEED,
    tick: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Every intervention on a ResidualGPT (explicit attention, so a no-op hook changes nothing) -> raw numbers.

    raw: clean [seq]; layers {intervention: [layer] [seq] or None where the model lacks the hook};
    heads {zero_head, mean_head: [layer][head] [seq] or None}; identity {clean: [layer] [seq, offset],
    intervention: [layer] [seq, offset]} at blocks.{l}.hook_resid_post (None without decoders);
    patching {clean, corrupt [seq], first_resid_pre [seq], sites {site: [layer] [seq]}, heads [layer][head]
    [seq] or None}; no_op [seq] (every hook point but hook_scale hooked with a hook that changes nothing).
    """
    model.eval()
    model.set_explicit_attention(True)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    sites = [f"blocks.{layer}.hook_resid_post" for layer in range(L)]
    keep = decoders is not None

    def run(hooks, at=()):
        """Per-sequence losses under hooks, and decoder CE [seq, offset] at the sites `at` (layer numbers)."""
        names = [sites[layer] for layer in at] if decoders is not None else []
        losses, ces = [], []
        for x, y in batches:
            loss, acts = iv.per_sequence_loss(model, x, y, hooks, keep=names)
            losses.append(loss)
            ces.append([decoders.per_sequence_ce(n, acts[n], x) for n in names])
        tick()
        return _cat(losses), [_cat([c[i] for c in ces]) for i in range(len(names))]

    raw: dict[str, Any] = {}
    raw["clean"], clean_ident = run([], range(L))
    # Every hook point but the LayerNorms' hook_scale, whose hook switches ResidualGPT to TransformerLens's
    # explicit LayerNorm formula (a different rounding, ~1e-7): hooking any other changes nothing, bit for bit.
    raw["no_op"], _ = run(iv.no_op([n for n in model.hook_dict if not n.endswith("hook_scale")]))
    raw["layers"], raw["identity"] = {}, ({"clean": clean_ident} if keep else None)
    for name in iv.LAYER_INTERVENTIONS:
        if not iv.applicable(model, name):
            raw["layers"][name] = None
            continue
        results = [run(iv.layer_hooks(name, layer), [layer]) for layer in range(L)]
        raw["layers"][name] = [r[0] for r in results]
        if keep:
            raw["identity"][name] = [r[1][0] for r in results]
    has_heads = iv.applicable(model, "zero_head")
    means = iv.head_means(model, [x for x, _ in batches]) if has_heads else None
    raw["heads"] = {
        name: [
            [run(iv.ablate_heads(layer, h, None if name == "zero_head" else means[layer]))[0] for h in range(H)]
            for layer in range(L)
        ]
        if has_heads
        else None
        for name in iv.HEAD_INTERVENTIONS
    }
    raw["patching"] = patching(model, batches, patch_pos, unigram, corrupt_seed, tick)
    return raw


@torch.no_grad()
def patching(model, batches, pos: int, unigram: np.ndarray, seed: int, tick) -> dict[str, Any]:
    """Previous-token denoising at position pos (see the module docstring) -> per-sequence losses at pos."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    has_heads = iv.applicable(model, "zero_head")
    names = {site: [f"blocks.{layer}.hook_{site}" for layer in range(L)] for site in PATCH_SITES}
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)] if has_heads else []
    first = "blocks.0.hook_resid_pre"
    wanted = [first, *names["attn_out"], *names["resid_post"], *z_names]
    out: dict[str, Any] = {
        "clean": [],
        "corrupt": [],
        "first_resid_pre": [],
        "sites": {site: [[] for _ in range(L)] for site in PATCH_SITES},
        "heads": [[[] for _ in range(H)] for _ in range(L)] if has_heads else None,
    }
    for batch, (x, y) in enumerate(batches):
        x, y = x[:, : pos + 1], y[:, : pos + 1]
        at = torch.full((len(x),), pos)
        bad = corrupt_previous(x, pos, unigram, seed + batch)
        clean, cache = iv.per_sequence_loss(model, x, y, keep=wanted, positions=at)
        corrupt, _ = iv.per_sequence_loss(model, bad, y, positions=at)
        out["clean"].append(clean)
        out["corrupt"].append(corrupt)

        def patched(name, head=None):
            return iv.per_sequence_loss(model, bad, y, iv.patch(name, cache[name], None, at, head), positions=at)[0]

        out["first_resid_pre"].append(patched(first))
        for site in PATCH_SITES:
            for layer in range(L):
                out["sites"][site][layer].append(patched(names[site][layer]))
        for layer, z in enumerate(z_names):
            for h in range(H):
                out["heads"][layer][h].append(patched(z, h))
    tick()
    return {
        "clean": _cat(out["clean"]),
        "corrupt": _cat(out["corrupt"]),
        "first_resid_pre": _cat(out["first_resid_pre"]),
        "sites": {s: [_cat(v) for v in out["sites"][s]] for s in PATCH_SITES},
        "heads": [[_cat(v) for v in row] for row in out["heads"]] if has_heads else None,
    }


def n_ticks(cfg: ModelConfig, identity: bool) -> int:
    """How many times measure_model calls tick (for a progress bar)."""
    from interp.config.registry import mixer_spec

    spec = mixer_spec(cfg.mixer)
    pattern = 3 if spec.has_pattern else 0
    heads = 2 * cfg.n_layers * cfg.n_heads if spec.has_heads else 0
    return 2 + (2 + pattern) * cfg.n_layers + heads + 1


# ----- from raw numbers to effects ----------------------------------------------------------------------


def mean_raw(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """The element-wise mean of several runs' raw numbers (seeds of one variant: the same sequences)."""

    def avg(items):
        first = items[0]
        if first is None:
            return None
        if isinstance(first, dict):
            return {k: avg([i[k] for i in items]) for k in first}
        if isinstance(first, list):
            return [avg([i[j] for i in items]) for j in range(len(first))]
        return np.mean(np.stack(items), axis=0)

    return avg(raws)


def probe_levels(train: Any, batches: list, d_vocab: int) -> dict[str, Any]:
    """Where a decoder's cross-entropy for the token at offsets 0 and -1 sits: knowing nothing (the add-one
    unigram of the training tokens) and knowing only the current token (0 for offset 0; for offset -1 the
    add-one p(previous | current) from training pairs), both on the intervened validation sequences."""
    tokens = np.asarray(train, dtype=np.int64)
    uni = np.bincount(tokens, minlength=d_vocab) + 1.0
    log_uni = np.log(uni / uni.sum())
    pairs = np.zeros((d_vocab, d_vocab)) + 1.0  # [current, previous], add-one
    np.add.at(pairs, (tokens[1:], tokens[:-1]), 1.0)
    log_prev = np.log(pairs / pairs.sum(1, keepdims=True))
    x = np.concatenate([b[0].cpu().numpy() for b in batches])
    unigram = float(-log_uni[x].mean())
    previous = float(-log_prev[x[:, 1:], x[:, :-1]].mean())
    return {
        "offsets": [0, -1],
        "unigram_ce": [unigram, float(-log_uni[x[:, :-1]].mean())],
        "current_token_ce": [0.0, previous],
    }


def summarise(
    raw: dict[str, Any],
    idx: np.ndarray,
    levels: dict[str, float],
    margin: float,
    probe_levels: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Effects with intervals: the results.json record of one run or one variant (see the schema)."""
    clean = raw["clean"]
    out: dict[str, Any] = {"clean_loss": interval(clean, idx)}
    out["clean_place"] = place(out["clean_loss"]["mean"], levels, None, margin)

    def effect(name: str, layer: int, values: np.ndarray) -> dict[str, Any]:
        row = {"delta": interval(values - clean, idx), "loss": interval(values, idx)}
        row["place"] = place(row["loss"]["mean"], levels, None, margin)
        if raw.get("identity") is not None:
            before, after = raw["identity"]["clean"][layer], raw["identity"][name][layer]
            row["identity"] = {
                "clean_ce": [float(v) for v in before.mean(0)],
                "ce": [float(v) for v in after.mean(0)],
                "delta_ce": [interval(after[:, j] - before[:, j], idx) for j in range(after.shape[1])],
            }
        return row

    out["layers"] = {
        name: None if per_layer is None else [effect(name, layer, v) for layer, v in enumerate(per_layer)]
        for name, per_layer in raw["layers"].items()
    }
    out["heads"] = {
        name: None if grid is None else [[interval(v - clean, idx) for v in row] for row in grid]
        for name, grid in raw["heads"].items()
    }
    p = raw["patching"]
    gap = p["corrupt"] - p["clean"]

    def restored(values):
        return ratio_interval(p["corrupt"] - values, gap, idx)

    out["patching"] = {
        "clean_loss": float(p["clean"].mean()),
        "corrupt_loss": float(p["corrupt"].mean()),
        "gap": interval(gap, idx),
        "first_resid_pre": restored(p["first_resid_pre"]),
        "sites": {s: [restored(v) for v in p["sites"][s]] for s in PATCH_SITES},
        "heads": None if p["heads"] is None else [[restored(v) for v in row] for row in p["heads"]],
    }
    out["no_op_max_abs"] = float(np.abs(raw["no_op"] - clean).max())
    if probe_levels is not None:
        out["probe_levels"] = probe_levels
    return out


# ----- sanity checks --------------------------------------------------------------------------------------


def sanity_checks(
    variant: str, cfg: ModelConfig, raw: dict[str, Any], levels: dict[str, float], margin: float
) -> list[dict[str, Any]]:
    """Checks that each intervention does what it says, on one run's raw numbers."""
    from interp.config.registry import mixer_spec

    clean, checks = raw["clean"], []

    def add(check, value, expected, ok):
        checks.append({"variant": variant, "check": check, "value": float(value), "expected": expected, "ok": bool(ok)})

    def exactly_zero(check, value):
        add(check, value, "exactly 0", value == 0)

    moved = np.abs(raw["no_op"] - clean).max()
    exactly_zero("no-op hooks on every hook point but hook_scale: max |change| in per-sequence loss", moved)
    uniform = mixer_spec(cfg.mixer).pattern_is_causal_uniform(cfg)
    absent = (
        ("remove_attn_residual", "the model has no attention residual", 0.0, not cfg.attn_residual),
        ("remove_ffn_residual", "the model has no FFN residual", 0.0, not cfg.ffn_residual),
        ("knock_out_self", "the model has no self path", 1e-5, cfg.self_bias == -math.inf),
        ("self_only", "the model reads only itself already", 0.0, cfg.self_bias == math.inf),
        ("uniform_pattern", "the model's pattern is uniform already", 1e-5, uniform),
    )
    for name, why, tol, holds in absent:
        per_layer = raw["layers"].get(name)
        if not holds or per_layer is None:
            continue
        worst = max(float(np.abs(v - clean).max()) for v in per_layer)
        expected = "exactly 0" if tol == 0 else f"< {tol:g}"
        add(f"{name} is a no-op ({why}): max |change| over layers", worst, expected, worst <= tol)
    if cfg.self_bias == math.inf and raw["layers"].get("knock_out_self") is not None and not cfg.attn_residual:
        lowest = min(float(v.mean()) for v in raw["layers"]["knock_out_self"])
        add(
            "knock_out_self in a self-only model without attention residual: lowest loss over layers (the "
            "stream is cut)",
            lowest,
            f">= unigram - margin = {levels['unigram'] - margin:.3f}",
            lowest >= levels["unigram"] - margin,
        )
    p = raw["patching"]
    first = float(np.abs(p["first_resid_pre"] - p["corrupt"]).max())
    exactly_zero(
        "patching blocks.0.hook_resid_pre at T (the previous token has not arrived): max |patched - corrupt|", first
    )
    last = float(np.abs(p["sites"]["resid_post"][-1] - p["clean"]).max())
    exactly_zero("patching the last resid_post at T (all the model knows there): max |patched - clean|", last)
    return checks


def export_difference(
    model, batch: tuple[torch.Tensor, torch.Tensor], patch_pos: int, unigram: np.ndarray
) -> dict[str, Any] | None:
    """Largest |per-sequence loss difference| between the model and its TransformerLens export, same hooks."""
    import warnings

    from interp.config.registry import mixer_spec
    from interp.tl.load import load_tl

    if not mixer_spec(model.cfg.mixer).exports_to_tl():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the export's notes on non-additive streams: not what is compared
        tl = load_tl(model)
    x, y = batch
    hooks = {name: iv.layer_hooks(name, layer) for name in iv.LAYER_INTERVENTIONS for layer in [0]}
    if iv.applicable(model, "zero_head"):
        hooks["zero_head 0.0"] = iv.ablate_heads(0, 0)
    at = torch.full((len(x),), patch_pos)
    xs, ys = x[:, : patch_pos + 1], y[:, : patch_pos + 1]
    _, cache = iv.per_sequence_loss(model, xs, ys, keep=["blocks.0.hook_resid_post"])
    worst = {}
    for name, h in hooks.items():
        if not all(n in tl.hook_dict for n, _ in h):
            continue
        a, b = (iv.per_sequence_loss(m, x, y, h)[0] for m in (model, tl))
        worst[name] = float((a - b).abs().max())
    bad = corrupt_previous(xs, patch_pos, unigram)
    h = iv.patch("blocks.0.hook_resid_post", cache["blocks.0.hook_resid_post"], None, at)
    patched, exported = (iv.per_sequence_loss(m, bad, ys, h, positions=at)[0] for m in (model, tl))
    worst["patch resid_post 0"] = float((patched - exported).abs().max())
    return {"max_abs_diff": max(worst.values()), "per_intervention": worst, "sequences": len(x)}
