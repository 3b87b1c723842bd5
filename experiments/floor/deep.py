"""The deep part read: paper-124m's depth in miniature, and per layer the gradients of the first steps.

The question (issue 59): attn_only at 12 layers, warm-up against a constant lr from step 0, with full and ffn_only
as anchors - how many runs sit on the floor at the end, and do the gradient norms of the first steps tell the two
schedules apart (the floor page's candidate: deep unskipped FFNs at a full lr from step 0)? The floor fractions are
the arms' cells (experiments.floor.per_run.arm_cell: Kaplan-Meier, as every arm); this module adds the per-layer
gradient-norm table (probes.GradientProbe's records, before clipping, on each run's own training batch), the
log-rank test between the two attn_only arms and the 3x lines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.errors import ToolkitError

GRAD_STEPS = (0, 1, 2, 5, 10, 25, 50)  # the table's steps (those within the probe's every-step span)
GRAD_PARTS = ("attn", "mlp", "resid")  # per layer: attention and MLP parameters, dLoss/d(resid_pre)


def grad_steps(dense: int) -> list[int]:
    return [s for s in GRAD_STEPS if s <= dense]


def early_grads(probes: dict[str, list[dict[str, Any]]], steps: list[int], run: str = "a run") -> dict[str, dict]:
    """step (as text) -> the gradient probe's per-layer norms and total at that step, for the steps logged; a
    record without them, or a second one at a step, is refused naming `run` (a cut or edited probes.jsonl)."""
    wanted, out, layers = set(steps), {}, set()
    for r in probes.get("gradients", []):
        if r["step"] not in wanted:
            continue
        missing = [k for k in (*GRAD_PARTS, "total") if k not in r]
        if not missing and _norms(r):  # one shape at every step, attention's and the MLP's one value a layer each
            layers.add(tuple(len(r[k]) for k in GRAD_PARTS))
        cut = not missing and (not _norms(r) or len(layers) > 1 or any(a != m for a, m, _ in layers))
        if missing or str(r["step"]) in out or cut:
            what = (
                f"lacks {', '.join(missing)}"
                if missing
                else "is the second one at that step"
                if str(r["step"]) in out
                else "is not one list of numbers a layer for each part (a cut or edited record)"
            )
            raise ToolkitError(
                f"{run}/probes.jsonl: the gradients record at step {r['step']} {what}; the probe writes one whole "
                "record a step - move that run aside and run again"
            )
        out[str(r["step"])] = {k: r[k] for k in (*GRAD_PARTS, "total")}
    return out


def _norms(r: dict[str, Any]) -> bool:
    """Each part a non-empty list of numbers, one a layer, and the total a number (no bool, no string)."""
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    return number(r["total"]) and all(
        isinstance(r[k], list) and r[k] and all(number(x) for x in r[k]) for k in GRAD_PARTS
    )


def grad_table(runs: list[dict[str, Any]], lrs: dict[str, dict[str, float]], steps: list[int]) -> list[dict]:
    """Per deep arm and step: the lr, and per layer the median over its runs of each GRAD_PARTS norm."""
    rows = []
    for name in dict.fromkeys(r["variant"] for r in runs):
        rs = [r for r in runs if r["variant"] == name]
        for s in steps:
            lacking = [r["run_dir"] for r in rs if str(s) not in r["grads"]]
            if lacking:  # the probe logs every step to its dense end: a missing one is a cut or edited log
                raise ToolkitError(
                    f"{lacking[0]}/probes.jsonl has no gradients record at step {s} ({len(lacking)} of {name}'s "
                    f"{len(rs)} runs lack one), though the deep part's probe logs every step to {max(steps)}; the "
                    "table is never a median of the other runs - move that run aside and run again"
                )
            have = [r["grads"][str(s)] for r in rs]
            row: dict[str, Any] = {"arm": name, "step": s, "lr": lrs[name][str(s)], "n": len(have)}
            for part in (*GRAD_PARTS, "total"):
                row[part] = np.median(np.array([h[part] for h in have], dtype=float), axis=0).tolist()
            rows.append(row)
    return rows


def step0_gap(runs: list[dict[str, Any]], warm: str, constant: str) -> float | None:
    """The largest |difference| at step 0 between the two schedules' runs of one seed (same weights, same first
    batch: 0 unless something other than the lr differs), over layers and parts; None without a pair."""
    by = {(r["variant"], r["seed"]): r["grads"].get("0") for r in runs}
    gaps = []
    for (name, seed), g in by.items():
        other = by.get((constant, seed))
        if name != warm or g is None or other is None:
            continue
        for part in GRAD_PARTS:
            gaps += [abs(a - b) for a, b in zip(g[part], other[part], strict=True)]
    return max(gaps) if gaps else None


def deep_summary(results: dict[str, Any]) -> list[str]:
    """The deep part's console lines: the two schedules compared, the 3x arms, the gradient tables."""
    deep = results.get("deep")
    if not deep:
        return []
    lines = []
    cells = {c["name"]: c for c in results["cells"]}
    warm, const = cells.get(deep["warmup_arm"]), cells.get(deep["constant_arm"])
    if warm and const:
        p = deep["logrank_p"]
        lines.append(
            f"deep ({deep['depth']} layers): on the floor at step {const['last_step']}, attn_only with a constant lr "
            f"{floor_text(const)}, with warm-up ({deep['warmup_steps']} steps) {floor_text(warm)}"
            + ("" if p is None else f"; log-rank p = {p:.2g}")
        )
    lines += [confirm_line(cells[name]) for name in deep["confirm_arms"] if name in cells]
    gap = deep["step0_gap"]
    if gap is not None:
        lines.append(f"deep: step-0 gradient norms, warm-up against constant, same seed: largest gap {gap:.2g}")
    for part, what in (("mlp", "MLP parameters"), ("attn", "attention parameters")):
        lines.append(f"per layer, gradient norm of the {what} before clipping (median over runs; lr at that step):")
        lines += grad_lines(deep["grad_table"], part, deep)
    return lines


def confirm_line(cell: dict[str, Any], what: str = "") -> str:
    """A 3x arm's console line (`what` names the arm it confirms): how many of its seeds escaped, its median."""
    med = cell["median"]["median"]
    n, escaped, last = cell["n"], cell["n_escaped"], cell["last_step"]
    said = f"{cell['name']} ({what}at 3x, {n} seeds): {escaped} of {n} escaped by step {last}"
    return said + ("" if med is None else f", median {med:.0f}")


def floor_text(cell: dict[str, Any]) -> str:
    s = cell["survival_at_last"]
    return f"{s[0]:.2f} [{s[1]:.2f}, {s[2]:.2f}] ({cell['n'] - cell['n_escaped']} of {cell['n']})"


def shown(row: dict[str, Any], deep: dict[str, Any]) -> bool:
    """The console's rows: the two attn_only schedules at every step, the anchors at step 0 (not the 3x arms:
    the report's tables hold every arm and step)."""
    schedules = (deep["warmup_arm"], deep["constant_arm"])
    return row["arm"] not in deep["confirm_arms"] and (row["arm"] in schedules or row["step"] == 0)


def grad_lines(table: list[dict[str, Any]], part: str, deep: dict[str, Any]) -> list[str]:
    rows = [r for r in table if shown(r, deep)]
    if not rows:
        return ["    (no gradient records at these steps)"]
    width = max(len(r["arm"]) for r in rows)
    layers = len(rows[0][part])
    head = f"    {'arm':<{width}}  step  lr       " + " ".join(f"{'L' + str(k):>7}" for k in range(layers))
    return [head] + [
        f"    {r['arm']:<{width}}  {r['step']:>4}  {r['lr']:<7.2g}  {' '.join(f'{v:>7.3g}' for v in r[part])}"
        for r in rows
    ]


def grad_table_rows(deep: dict[str, Any], part: str) -> tuple[list[str], list[list[str]]]:
    """One gradient table (every arm and step) for report.html."""
    table = deep["grad_table"]
    layers = len(table[0][part]) if table else 0
    labels = [f"L{k}" for k in range(layers)]
    if part == "resid" and labels:  # resid_pre of each block, then the last block's resid_post
        labels[-1] = "final"
    headers = ["arm", "step", "lr", "runs", *labels]
    rows = [[r["arm"], str(r["step"]), f"{r['lr']:.2g}", str(r["n"]), *[f"{v:.3g}" for v in r[part]]] for r in table]
    return headers, rows
