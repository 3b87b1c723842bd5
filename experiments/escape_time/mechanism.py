"""What changes inside a run when it leaves the floor: a probe taken through training, curves aligned on escape.

EscapeProbe (a trainer callback) records at every `interval`-th evaluation step, on the first
MECH_BATCHES fixed validation batches: the loss as trained, the loss with each routing intervention applied
at every layer at once (knock_out_self: attention cannot read its own position; self_only: it reads only
its own position; uniform_pattern: causal uniform weights), and current-token decodability at block 0's
resid_mid (probes.identity, offset 0, one site). The default probes add alpha_tt by layer, gradient norms
by block and hidden-norm growth; probes.uniformity.UniformityProbe adds token uniformity (Dong et al.'s
residual ||X - mean_t X|| / ||X|| at the last resid_post: 0 = every position the same) and the gradient
norm reaching the queries and keys, sqrt(sum over layers of |dL/dW_Q|^2 + |dL/dW_K|^2). A run logged
without one of these probes has none of its series, and aligned() counts it in no such measure's n_runs.
Each measure is then read against the run's escape step:

    aligned curves   each run's series against (step - escape step), linear between its probe steps,
                     averaged over the runs that escaped
    onset            the first probe step after the first half of the plateau (from step warmup_steps, 50 at phase-cell,
                     to escape) at which the measure has left the plateau's band (median +/- max(3
                     robust SDs, a quarter of its total change)) towards where it ends, and is
                     still outside it at the next probe
    lead             onset - escape step: negative means it moved before the loss left the floor
    before / after   the last probe at least two probe intervals before the escape step against the first
                     at least two after it, paired per run, with a bootstrap interval of the mean change
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MECH_BATCHES = 2
INTERVENTIONS = ("knock_out_self", "self_only", "uniform_pattern")
IDENTITY_SITE = "blocks.0.hook_resid_mid"
ALIGN_POINTS = 8  # probe intervals either side of the escape step on the aligned curves
BOOTSTRAP = 1000
SEED = 7

MEASURES = {
    "alpha_tt_layer0": "alpha_tt, layer 0",
    "alpha_tt_mean": "alpha_tt, mean over layers",
    "grad_block0": "gradient norm, block 0",
    "growth": "hidden-norm growth (last / first)",
    "identity": "current-token decodability, block 0 resid_mid",
    "knock_out_self": "loss change, self path knocked out",
    "self_only": "loss change, attention reads only itself",
    "uniform_pattern": "loss change, uniform attention",
    "residual_last": "residual, last resid_post",
    "qk_grad": "query/key gradient norm (all layers)",
}


class EscapeProbe:
    """Trainer callback: interventions and the current-token decoder every `interval` steps (and at the end)."""

    def __init__(self, interval: int):
        self.interval = interval

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if (step % self.interval and step != trainer.train_cfg.max_steps) or not getattr(trainer, "is_main", True):
            return
        measured = measure_escape_probe(trainer.model, trainer.corpus.train, trainer.val_batches[:MECH_BATCHES])
        trainer.append("probes.jsonl", {"step": step, "probe": "escape", **measured})


def measure_escape_probe(model, train_tokens, batches) -> dict[str, float]:
    """Loss plain and under each intervention (every layer), and block-0 current-token decodability."""
    import torch

    from interp.model.eval_mode import eval_mode
    from interp.reading.interventions import layer_hooks, per_sequence_loss
    from probes.identity import measure_identity as identity

    with eval_mode(model):
        with torch.no_grad():
            out = {}
            for name in ("loss", *INTERVENTIONS):
                layers = range(model.cfg.n_layers)
                hooks = [] if name == "loss" else [h for layer in layers for h in layer_hooks(name, layer)]
                losses = [per_sequence_loss(model, x, y, hooks)[0].mean().item() for x, y in batches]
                out[name] = float(np.mean(losses))
        result = identity(model, train_tokens, batches, offsets=(0,), sites=[IDENTITY_SITE])
        out["identity"] = float(result["accuracy"][0][0])
    return out


def series(probes: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[int, float]]]:
    """Each measure of one run as (step, value) pairs, from its probe records."""
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in MEASURES}
    for r in probes.get("attention", []):
        layers = r.get("alpha_tt_layer_mean") or []
        if layers:
            out["alpha_tt_layer0"].append((r["step"], layers[0]))
            out["alpha_tt_mean"].append((r["step"], float(np.mean(layers))))
    for r in probes.get("gradients", []):
        out["grad_block0"].append((r["step"], math.hypot(r["attn"][0], r["mlp"][0])))
    for r in probes.get("norms", []):
        out["growth"].append((r["step"], r["growth"]))
    for r in probes.get("escape", []):
        out["identity"].append((r["step"], r["identity"]))
        for name in INTERVENTIONS:
            out[name].append((r["step"], r[name] - r["loss"]))
    for r in probes.get("uniformity", []):  # a run trained without UniformityProbe has neither
        out["residual_last"].append((r["step"], r["residual"][-1]))
        g = r.get("grads", {})
        if "q" in g:  # {"skipped": why} where the mixer has no queries and keys
            out["qk_grad"].append((r["step"], math.sqrt(sum(x * x for x in g["q"] + g["k"]))))
    return {k: sorted(v) for k, v in out.items() if all(math.isfinite(x) for _, x in v)}


def onset(points: list[tuple[int, float]], warmup: int, escape: int) -> int | None:
    """The module docstring's onset step of one measure of one run, or None where it cannot be read."""
    base = [x for s, x in points if warmup <= s <= warmup + (escape - warmup) / 2]
    later = [(s, x) for s, x in points if s > warmup + (escape - warmup) / 2]
    if len(base) < 3 or len(later) < 2:
        return None
    b = float(np.median(base))
    noise = 1.4826 * float(np.median(np.abs(np.array(base) - b)))
    total = later[-1][1] - b
    band = max(3 * noise, abs(total) / 4)
    if band == 0:
        return None
    direction = 1.0 if total >= 0 else -1.0
    out = [(x - b) * direction > band for _, x in later]
    return next((int(later[k][0]) for k in range(len(later) - 1) if out[k] and out[k + 1]), None)


def before_after(points: list[tuple[int, float]], escape: int, gap: int) -> tuple[float, float] | None:
    before = [x for s, x in points if s <= escape - gap]
    after = [x for s, x in points if s >= escape + gap]
    return (before[-1], after[0]) if before and after else None


def _interval(values: list[float], statistic=np.mean) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of the statistic (the mean; a median for the leads)."""
    rng = np.random.default_rng(SEED)
    a = np.asarray(values, dtype=float)
    stats = statistic(a[rng.integers(0, len(a), size=(BOOTSTRAP, len(a)))], axis=1)
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def aligned(
    runs: list[dict[str, Any]], warmup: int, probe_interval: int, measures: dict[str, str] = MEASURES
) -> dict[str, Any]:
    """Over the runs that escaped (each {"escape", "series"}): per measure (name -> label), the aligned mean
    curve, the lead of its onset over the escape step, and the change from before to after."""
    escaped = [r for r in runs if r["escape"] is not None]
    offsets = [k * probe_interval for k in range(-ALIGN_POINTS, ALIGN_POINTS + 1)]
    out: dict[str, Any] = {"n_escaped": len(escaped), "offsets": offsets, "measures": {}}
    for name in measures:
        curves, leads, changes = [], [], []
        for r in escaped:
            points = r["series"].get(name, [])
            if not points:
                continue
            curves.append(_resample([s for s, _ in points], [x for _, x in points], [r["escape"] + o for o in offsets]))
            t = onset(points, warmup, r["escape"])
            if t is not None:
                leads.append(t - r["escape"])
            pair = before_after(points, r["escape"], 2 * probe_interval)
            if pair is not None:
                changes.append(pair[1] - pair[0])
        at_offset = [[c[k] for c in curves if c[k] is not None] for k in range(len(offsets))]
        out["measures"][name] = {
            "label": measures[name],
            "n_runs": len(curves),
            "mean_curve": [float(np.mean(vals)) if vals else None for vals in at_offset],
            "lead": _summary(leads, "median", np.median),
            "change": _summary(changes, "mean", np.mean),
        }
    return out


def _summary(values: list[float], name: str, statistic) -> dict[str, Any]:
    """{n, name: the statistic of the values, interval: its bootstrap interval}; None where too few to say."""
    return {
        "n": len(values),
        name: float(statistic(values)) if values else None,
        "interval": _interval(values, statistic) if len(values) >= 3 else None,
    }


def _resample(steps: list[int], values: list[float], at: list[int]) -> list[float | None]:
    """Values at the steps `at`, linear between recorded steps (escape steps fall on evaluation steps, a
    probe may record every few of them); None outside the recorded range."""
    return [float(np.interp(t, steps, values)) if steps[0] <= t <= steps[-1] else None for t in at]


def order(result: dict[str, Any]) -> list[tuple[str, float, int]]:
    """The measures with a lead, earliest first: (name, median lead, runs it rests on)."""
    leads = {k: m["lead"] for k, m in result["measures"].items()}
    items = [(k, lead["median"], lead["n"]) for k, lead in leads.items() if lead["median"] is not None]
    return sorted(items, key=lambda t: t[1])


def self_path_answer(result: dict[str, Any], min_runs: int) -> str:
    """The routing hypothesis asked of the escapes: does attention build a self path as the loss leaves?"""
    alpha = result["measures"]["alpha_tt_layer0"]["change"]
    knock = result["measures"]["knock_out_self"]["change"]
    n = min(alpha["n"], knock["n"])
    if n < min_runs or alpha["interval"] is None or knock["interval"] is None:
        return (
            f"not settled: the before/after comparison rests on {n} escaped run(s), fewer than the {min_runs} it needs"
        )
    up = alpha["interval"][0] > 0
    hurts = knock["interval"][0] > 0
    a = f"alpha_tt at layer 0 {alpha['mean']:+.3f} [{alpha['interval'][0]:+.3f}, {alpha['interval'][1]:+.3f}]"
    k = (
        f"the loss cost of knocking out the self path {knock['mean']:+.3f} "
        f"[{knock['interval'][0]:+.3f}, {knock['interval'][1]:+.3f}] nats"
    )
    if up and hurts:
        verdict = "yes: attention builds a self path as the runs leave the floor"
    elif not up and not hurts:
        verdict = "no: neither the self-weight nor the self path's importance rises across the escape"
    else:
        verdict = "mixed: one of the two rises across the escape, the other does not"
    return f"{verdict} ({a}; {k}; before -> after the escape, {n} runs)"
