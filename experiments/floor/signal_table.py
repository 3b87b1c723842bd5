"""Signal propagation at initialisation: how fast each wiring's stream loses token diversity with depth.

No training. For every configuration (CONFIGS), depth, width and context length of the table, and for the knob's
query/key initial scales (the dose response: ffn_only at DEFAULT_DOSES' depths), INIT seeds of
the model a run would start from (experiments.floor.init_measure) are measured on the trainer's first fixed
validation batches at that context length, its forward in float64 (the float32 weights cast exactly): the
residual, mean cosine and effective rank at the last block's resid_post. Each cell gives the mean over seeds
with a 95% t interval (scipy.stats.t). The rate per layer is exp(slope) of log(residual) against depth, least
squares over every (depth, seed) of the depth sweep (scipy.stats.linregress), with its 95% interval: 1 = no
collapse, 0.5 = the distance from uniformity halves each layer.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from experiments.floor.init_measure import init_model, probe_batches
from experiments.floor.knob import scale_qk
from probes.uniformity import token_uniformity

CONFIGS = {
    "full": {"residual": "full"},
    "attn_only": {"residual": "attn_only"},
    "ffn_only": {"residual": "ffn_only"},
    "none": {"residual": "none"},
    "ffn_only + self_bias 4": {"residual": "ffn_only", "self_bias": 4.0},
}
# preset -> (depths, widths, context lengths, depths of the width and context sweeps)
PRESET_TABLE = {"smoke": ((1, 2, 3), (32,), (32,), (2,))}
DEFAULT_TABLE = (tuple(range(1, 13)), (64, 128, 256), (32, 64, 128, 256), (2, 3, 6, 12))
# The knob's dose response (experiments.floor.knob): ffn_only at these depths, query/key initial scale s
PRESET_DOSES = {"smoke": ((2,), (1.0, 8.0))}
DEFAULT_DOSES = ((2, 3), (1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0))


def _mean_interval(values: list[float]) -> dict[str, float]:
    from scipy import stats

    a = np.asarray(values, dtype=float)
    m = float(a.mean())
    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else math.inf
    return {"mean": m, "lower": m - half, "upper": m + half}


def _uniformity64(model_cfg, seed: int, batches, init) -> dict[str, Any]:
    """token_uniformity of the float32-initialised model run in float64 (the cast is exact). Near total collapse
    the stream is a small difference of nearly equal rows: a float32 forward's rounding adds directions to it,
    raising erank by up to 1.1% and differently on each CPU's kernels (docs/results/floor.md)."""
    return token_uniformity(init_model(model_cfg, seed, init).double(), batches)


def _cell(model_cfg, seeds: list[int], batches, scale: float = 1.0) -> dict[str, Any]:
    init = functools.partial(scale_qk, scale) if scale != 1.0 else None
    rows = [_uniformity64(model_cfg, s, batches, init) for s in seeds]
    out = {k: _mean_interval([r[k][-1] for r in rows]) for k in ("residual", "cosine", "erank")}
    out["per_seed"] = [r["residual"][-1] for r in rows]
    return out


def rate_per_layer(depths: list[int], per_seed: list[list[float]]) -> dict[str, float]:
    from scipy import stats

    x = [d for d, vals in zip(depths, per_seed, strict=True) for _ in vals]
    y = [math.log(max(v, 1e-300)) for vals in per_seed for v in vals]
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.975, len(x) - 2) * fit.stderr)
    return {
        "rate": math.exp(fit.slope),
        "lower": math.exp(fit.slope - half),
        "upper": math.exp(fit.slope + half),
        "n": len(x),
    }


def signal_table(spec, val, seeds: list[int], preset: str, progress: bool = False) -> dict[str, Any]:
    depths, widths, n_ctxs, sweep = PRESET_TABLE.get(preset, DEFAULT_TABLE)
    base = spec.model
    batches = {n: probe_batches(val, n, spec.train.batch_size) for n in {base.n_ctx, *n_ctxs}}
    work = [("depth", c, d, base.d_model, base.n_ctx) for c in CONFIGS for d in depths]
    work += [("width", c, d, w, base.n_ctx) for c in CONFIGS for d in sweep for w in widths if w != base.d_model]
    work += [("n_ctx", c, d, base.d_model, n) for c in CONFIGS for d in sweep for n in n_ctxs if n != base.n_ctx]
    dose_depths, scales = PRESET_DOSES.get(preset, DEFAULT_DOSES)
    work += [("qk_scale", "ffn_only", d, base.d_model, base.n_ctx, s) for d in dose_depths for s in scales]
    if progress:
        from tqdm import tqdm

        work = tqdm(work, desc="initialisation table", unit="cell", leave=False)
    cells = []
    for sweep_name, config, depth, width, n_ctx, *scale in work:
        cfg = base.replace(n_layers=depth, d_model=width, n_ctx=n_ctx, **CONFIGS[config])
        s = scale[0] if scale else 1.0
        labels = {"sweep": sweep_name, "config": config, "depth": depth, "width": width, "n_ctx": n_ctx, "scale": s}
        cells.append({**labels, **_cell(cfg, seeds, batches[n_ctx], s)})
    rates = {}
    for config in CONFIGS:
        row = [c for c in cells if c["sweep"] == "depth" and c["config"] == config]
        if len(row) >= 2:
            rates[config] = rate_per_layer([c["depth"] for c in row], [c["per_seed"] for c in row])
    return {
        "seeds": seeds,
        "depths": list(depths),
        "widths": list(widths),
        "n_ctxs": list(n_ctxs),
        "sweep_depths": list(sweep),
        "base": {"d_model": base.d_model, "n_ctx": base.n_ctx},
        "cells": cells,
        "rates": rates,
    }
