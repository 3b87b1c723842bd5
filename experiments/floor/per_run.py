"""One floor run read from its logs: escape, plateau, step-0 collapse and the measures aligned on escape."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from experiments.escape_time.mechanism import MEASURES as ESCAPE_MEASURES
from experiments.escape_time.mechanism import series as escape_series
from experiments.escape_time.survival import escape_step, survival_cell
from experiments.escape_time.survival import margins as floor_margins  # the escape rule's m/2, m and 2m
from experiments.floor.arms import Arm
from experiments.floor.plateau import cell_plateau, plateau
from experiments.runner.frame import Context, run_summary
from interp.errors import ToolkitError

MEASURES = {
    "residual_last": ESCAPE_MEASURES["residual_last"],
    "residual_block0": "residual, block 0 resid_post",
    "cosine_last": "mean cosine between positions, last resid_post",
    "erank_last": "effective rank, last resid_post",
    "qk_grad": ESCAPE_MEASURES["qk_grad"],
    "vo_grad": "value/output gradient norm (all layers)",
    **{k: ESCAPE_MEASURES[k] for k in ("alpha_tt_layer0", "grad_block0", "growth")},
}


def uniformity_series(probes: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in MEASURES}
    for r in probes.get("uniformity", []):
        if r.get("nonfinite"):  # a diverging stream's record (probes.uniformity.finite_record): not a point
            continue
        s = r["step"]  # residual_last and qk_grad: escape_series below reads them from the same records
        out["residual_block0"].append((s, r["residual"][2]))  # sites: resid_pre 0, resid_mid 0, resid_post 0
        out["cosine_last"].append((s, r["cosine"][-1]))
        out["erank_last"].append((s, r["erank"][-1]))
        g = r.get("grads", {})
        if "q" in g:
            out["vo_grad"].append((s, math.sqrt(sum(x * x for x in g["v"] + g["o"]))))
    for k, v in escape_series(probes).items():
        if k in out:
            out[k] = v
    return {k: sorted(v) for k, v in out.items() if v and all(math.isfinite(x) for _, x in v)}


def step0_u(record: dict[str, Any]) -> float:
    first = [r for r in record.get("probes", {}).get("uniformity", []) if r["step"] == 0]
    if not first:
        raise ToolkitError(
            f"{record['run_dir']}/probes.jsonl has no step-0 uniformity record (a run trained without "
            "probes.uniformity.UniformityProbe, or its probes.jsonl was cut): move that run aside and run again"
        )
    return -math.log(max(first[0]["residual"][-1], 1e-300))


def summarise_floor_run(record: dict[str, Any], ctx: Context, arms: dict[str, Arm]) -> dict[str, Any]:
    curve = record["val_curve"]
    if not curve["steps"]:
        raise ToolkitError(f"{record['run_dir']}/metrics.jsonl holds no validation evaluation; move that run aside")
    arm = arms[record["variant"]]
    steps = curve["steps"]  # evaluated from step 0: a run's own interval is its first (an arm may set its own)
    unigram = ctx.reference_levels()["unigram"]
    every = steps[1] - steps[0] if len(steps) > 1 else ctx.spec.train.eval_interval
    summary = run_summary(record)
    margins = floor_margins(ctx.args.margin)
    return {
        "variant": record["variant"],
        "seed": record["seed"],
        "part": arm.part,
        "residual": arm.residual,
        "n_layers": arm.depth,
        "scale": arm.scale,
        "schedule": arm.schedule,
        "d_model": arm.width or ctx.spec.model.d_model,
        "eval_every": every,
        "run_dir": summary["run_dir"],
        "steps": summary["steps"],
        "last_step": curve["steps"][-1],
        "final_val_loss": summary["final_val_loss"],
        "u": step0_u(record),
        "escape": {f"{m:g}": escape_step(curve["steps"], curve["loss"], unigram - m) for m in margins},
        "plateau": {f"{m:g}": plateau(curve["loss"], unigram, m, every) for m in margins},
        "series": uniformity_series(record.get("probes", {})),
        "val_curve": list(zip(curve["steps"], curve["loss"], strict=True)),
    }


def arm_cell(runs: list[dict[str, Any]], key: str, keys: list[str]) -> dict[str, Any]:
    first = runs[0]
    cell = {k: v for k, v in survival_cell(runs, key).items() if k != "km"}
    return {
        "name": first["variant"],
        **{k: first[k] for k in ("part", "residual", "n_layers", "scale", "schedule")},
        **cell,
        "u_mean": float(np.mean([r["u"] for r in runs])),
        "plateau": {k: cell_plateau(runs, k) for k in keys},
    }
