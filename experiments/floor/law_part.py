"""The law's reading of a floor command's runs: the fit, each held-out arm against its stored prediction, the text.

results["law"]      {fitted, form, a, b, c, g0, g1 {value, lower, upper}, sigma_by_depth, n_runs, n_escaped,
                    cells, params, n_refits, fitted_on {shipped, shipped_sha256, n_shipped}} (law.fit_wait_law on the
                    shipped runs and this command's control, knob, confirm and law runs); null without the law part
results["heldout"]  per held-out arm: prediction (as stored before training), created, seeds, last_step,
                    written_before_training, edited, seeds_match, u_match, observed {n, median (Kaplan-Meier,
                    None past the last step), floor_at_last, n_escaped, sigma (law.fit_spread on the arm's own
                    runs; None with fewer than 3 escapes)}, held {inside, within, held}, spread_held (the same
                    on sigma, where the prediction's spread is one; else None), control (the fit's cell at the
                    same depth and scale and the preset's width, if any), logrank_p
"""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.escape_time.survival import logrank_p
from experiments.floor.law import HELD_FACTOR, arm_columns, fit_spread, held_law, held_spread, tests_something
from experiments.floor.law_predictions import LAW_PREDICTIONS, fit_on, heldout_jobs, read_law_predictions, stored_entry
from experiments.floor.predictions import (
    edited,
    first_started,
    jobs_started,
    not_its_runs,
    step_text,
    without_draws,
    written_before_training,
)
from experiments.runner.frame import Context
from interp.errors import ToolkitError


def law_results(ctx: Context, arms, runs: list[dict[str, Any]], cells: list[dict[str, Any]]) -> dict[str, Any]:
    """{"law": ..., "heldout": ...} for results (called with the law part only)."""
    law, source = fit_on(ctx, runs)
    fit_runs = source.pop("runs")
    out = {"law": {**without_draws(law), "fitted_on": source}, "heldout": {}}
    stored = read_law_predictions(ctx)
    key = f"{ctx.args.margin:g}"
    names = arms.by_name()
    for cell in cells:
        arm = names[cell["name"]]
        if arm.part != "heldout":
            continue
        rs = [r for r in runs if r["variant"] == cell["name"]]
        entry = stored_entry(stored, cell["name"], key)
        every = arm.every or ctx.spec.train.eval_interval
        verdict = heldout_verdict(entry, cell, rs, key, every, first_started(ctx, rs))
        control = (arm.depth, ctx.spec.model.d_model, arm.scale)  # the fit's cell at the preset's width
        against = [r for r in fit_runs if tuple(r["cell"]) == control]
        verdict["control"] = f"ffn_only L{control[0]} d{control[1]} qk{control[2]:g}" if against else None
        observed = [{"escape": r["escape"][key], "last_step": r["last_step"]} for r in rs]
        verdict["logrank_p"] = logrank_p(observed, against)
        out["heldout"][cell["name"]] = verdict
    for arm in arms.arms:  # predicted and not trained yet (--predict-only): the prediction as stored
        entry = stored_entry(stored, arms.name(arm), key) if arm.part == "heldout" else None
        if entry is not None and arms.name(arm) not in out["heldout"]:
            out["heldout"][arms.name(arm)] = {**_stored(entry), "observed": None, "held": None}
    return out


def _stored(entry: dict[str, Any], started: float | None = None) -> dict[str, Any]:
    return {
        "prediction": entry["prediction"],
        "created": entry["created"],
        "seeds": entry["seeds"],
        "last_step": entry["last_step"],
        "edited": edited(entry),
        "written_before_training": written_before_training(entry, started),
    }


def heldout_verdict(
    entry: dict[str, Any] | None, cell: dict[str, Any], rs: list, key: str, every: int, started: float | None = None
) -> dict:
    steps = np.array([np.inf if r["escape"][key] is None else r["escape"][key] for r in rs], dtype=float)
    observed = {
        "n": cell["n"],
        "n_escaped": cell["n_escaped"],
        "median": cell["median"]["median"],  # Kaplan-Meier (experiments.escape_time.survival.median_escape)
        "floor_at_last": cell["survival_at_last"][0],
        "sigma": fit_spread(*arm_columns(steps, every, max((r["last_step"] for r in rs), default=0))),
    }
    if entry is None:  # no prediction stored before these runs: nothing to hold them to
        return {"prediction": None, "observed": observed, "written_before_training": False, "held": None}
    if len(entry.get("seeds") or []) != len(entry.get("us") or []):
        raise ToolkitError(
            f"{cell.get('name', 'a held-out arm')}'s stored prediction names {len(entry.get('seeds') or [])} seeds and "
            f"{len(entry.get('us') or [])} u's (one a seed): restore the committed prediction file"
        )
    by_seed = dict(zip(entry["seeds"], entry["us"], strict=True))
    return {
        **_stored(entry, started),
        "seeds_match": sorted(r["seed"] for r in rs) == sorted(entry["seeds"]),
        "u_match": max((abs(by_seed[r["seed"]] - r["u"]) for r in rs if r["seed"] in by_seed), default=None),
        "observed": observed,
        "held": held_law(entry["prediction"], observed["median"]),
        "spread_held": held_spread(entry["prediction"], observed["sigma"]),
    }


def law_lines(results: dict[str, Any]) -> list[str]:
    """The console's law and held-out lines (none where the law part did not run)."""
    law = results.get("law")
    if not law:
        return []
    if not law.get("fitted"):
        return [f"law: not fitted ({law.get('why')})"]
    return [wait_law_text(law)] + [heldout_line(name, h) for name, h in results.get("heldout", {}).items()]


def wait_law_text(law: dict[str, Any]) -> str:
    def p(v: dict[str, float]) -> str:
        return f"{v['value']:.2f} [{v['lower']:.2f}, {v['upper']:.2f}]"

    sig = ", ".join(f"L{d} {p(s)}" for d, s in law["sigma_by_depth"].items())
    src = law["fitted_on"]
    where = f"{src['n_shipped']} shipped runs from {src['shipped']} and this command's" if src["shipped"] else "this"
    return (
        f"law ({law['n_runs']} ffn_only constant-lr runs in {len(law['cells'])} cells, {law['n_escaped']} escaped; "
        f"{where} runs): log T = {p(law['a'])} + {p(law['b'])} u + {p(law['c'])} L, sigma by depth {sig}"
    )


def arm_prediction_text(p: dict[str, Any]) -> str:
    lo, hi = p["interval"]
    factor = "past the last step" if p["factor"] is None else f"x{p['factor']:.1f}"
    verdict = "" if p["is_prediction"] else f" - NOT a prediction: {p['why_not']}"
    return (
        f"median {step_text(p['median'])} [{step_text(lo)}, {step_text(hi)}] ({factor}), on the floor at the end "
        f"{p['floor_at_last']:.2f} [{p['floor_interval'][0]:.2f}, {p['floor_interval'][1]:.2f}]{verdict}"
        + (f"; {spread_text(p['spread'])}" if p.get("spread") else "")
    )


def spread_text(s: dict[str, Any]) -> str:
    if s["sigma"] is None:
        return f"the arm's own sigma: NOT a prediction: {s['why_not']}"
    said = f"the arm's own sigma {s['sigma']:.2f} [{s['interval'][0]:.2f}, {s['interval'][1]:.2f}] (x{s['factor']:.1f})"
    return said + ("" if s["is_prediction"] else f" - NOT a prediction: {s['why_not']}")


def _verdict_text(v: dict[str, Any], what: str) -> str:
    if v["held"]:
        return "held"
    where = "inside" if v["inside"] else "outside"
    near = "within" if v["within"] else "not within"
    return f"failed ({where} the interval, {near} x{HELD_FACTOR:g} of the predicted {what})"


def heldout_line(name: str, h: dict[str, Any]) -> str:
    o = h["observed"]
    if o is None:
        why = "not trained yet" if tests_something(h["prediction"]) else "not trained (no prediction to test)"
        said = arm_prediction_text(h["prediction"])
        return f"{name}: predicted by the law ({h['created']}, {len(h['seeds'])} seeds), {why}: {said}"
    obs = f"observed median {step_text(o['median'])}, {o['floor_at_last']:.2f} on the floor ({o['n']} runs)"
    if h["prediction"] is None:
        return f"{name}: no prediction was stored before these runs; {obs}"
    when = "written before training" if h["written_before_training"] else "NOT written before training"
    if h["edited"]:
        when = "EDITED in predictions-law.json after it was written"
    if not h["seeds_match"]:
        when += "; the runs are not the seeds it names"
    when += not_its_runs(h)
    verdict = _verdict_text(h["held"], "median") if h["prediction"].get("is_prediction") else "not a test"
    if h.get("spread_held") is not None:
        sigma = "none (fewer than 3 escapes)" if o["sigma"] is None else f"{o['sigma']:.2f}"
        verdict += f"; spread prediction {_verdict_text(h['spread_held'], 'sigma')} (observed sigma {sigma})"
    lr = "" if h.get("logrank_p") is None else f"; log-rank against {h['control']} p = {h['logrank_p']:.2g}"
    said = arm_prediction_text(h["prediction"])
    return f"{name}: law prediction {verdict} ({when}, {h['created']}): {said}; {obs}{lr}"


def preface_lines(ctx: Context, arms, names: list[str]) -> list[str]:
    """Before held-out arms train: each one's stored prediction, as the console prints it."""
    stored = read_law_predictions(ctx)
    key = f"{ctx.args.margin:g}"
    lines, late = [], False
    for name in names:
        arm = arms.by_name().get(name)
        if arm is None or arm.part != "heldout":
            continue
        entry = stored_entry(stored, name, key)
        if entry is not None:
            lines.append(
                f"{name}: predicted by the law ({entry['created']}, {len(entry['seeds'])} seeds, "
                f"u = {sum(entry['us']) / len(entry['us']):.3f}): {arm_prediction_text(entry['prediction'])}"
            )
            started = jobs_started(ctx, heldout_jobs(ctx, arms, arm, entry["seeds"]))
            late = late or not written_before_training(entry, started)  # edited, or too late
    if lines:
        when = "some not written before their runs (not a test)" if late else "all made before their arms trained"
        lines.append(f"law predictions read from {ctx.result_dir / LAW_PREDICTIONS}, {when}")
    return lines
