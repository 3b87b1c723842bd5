"""The interventions experiment's report: console table and summary, report.html sections and figures.

Reads results.json's dict (experiments.interventions' analyse); decides nothing (the rules are
experiments.interventions.rules).
"""

from __future__ import annotations

from typing import Any

from experiments.interventions.rules import bearing
from experiments.runner.frame import Context
from interp.reading.interventions import LAYER_INTERVENTIONS

SHORT = {
    "remove_attn_residual": "-attn resid",
    "remove_ffn_residual": "-ffn resid",
    "knock_out_self": "-self",
    "self_only": "self only",
    "uniform_pattern": "uniform",
    "zero_head": "zero head (worst)",
    "mean_head": "mean head (worst)",
    "attn_out": "patch attn_out",
    "resid_post": "patch resid_post",
}
IDENTITY_FLOW = ("remove_attn_residual", "knock_out_self", "self_only")  # the interventions that move the token


def cell(x: dict[str, float] | None, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    return f"{x['mean']:+.{digits}f} [{x['lo']:+.{digits}f},{x['hi']:+.{digits}f}]"


def worst_head(row: list[dict[str, float]]) -> dict[str, float]:
    return max(row, key=lambda x: x["mean"])


def rows_of(name: str, v: dict[str, Any]) -> list[tuple[str, list[dict[str, float] | None] | None]]:
    """(label, [layer] interval or None) for every row of one variant."""
    e = v["effects"]
    out = [
        (SHORT[i], None if e["layers"][i] is None else [r["delta"] for r in e["layers"][i]])
        for i in LAYER_INTERVENTIONS
    ]
    out += [(SHORT[h], None if grid is None else [worst_head(row) for row in grid]) for h, grid in e["heads"].items()]
    out += [(SHORT[s], e["patching"]["sites"][s]) for s in e["patching"]["sites"]]
    return out


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per (variant, intervention): the change in loss per layer with its interval (patching: restored)."""
    n_layers = results["config"]["model"]["n_layers"]
    headers = ["variant", "clean", "intervention", *[f"layer {i}" for i in range(n_layers)]]
    rows = []
    for name, v in results["variants"].items():
        clean = f"{v['effects']['clean_loss']['mean']:.3f}"
        for i, (label, cells) in enumerate(rows_of(name, v)):
            layer_cells = ["n/a"] * n_layers if cells is None else [cell(c) for c in cells]
            rows.append([name if i == 0 else "", clean if i == 0 else "", label, *layer_cells])
    return headers, rows


def summary(results: dict[str, Any]) -> str:
    m = results["margin"]
    b = results["bootstrap"]
    lines = [
        f"change in validation loss (nats, intervened - clean) on {results['n_sequences']} validation sequences "
        f"({results['val_batches']} fixed batches), mean over seeds, [{b['level']:.0%} bootstrap interval, "
        f"{b['resamples']} resamples]; head rows: the worst head of the layer; patch rows: fraction of the "
        f"previous-token loss gap restored at position {results['patch_pos']} (n/a: the model lacks the hook, "
        "or the gap is about 0)",
        "",
    ]
    for v in results["verdicts"]:
        lines.append(f"{v['id']} {v['title']}: {v['verdict'].upper()} ({bearing(v)})")
        lines.append(f"   predicted: {v['prediction']}")
        lines.append(f"   measured:  {v['measured']}")
        lines.append(f"   interval:  {v['interval']}   [rule: {v['rule'].format(m=m)}]")
    failed = [c for c in results["sanity"] if not c["ok"]]
    lines += ["", f"sanity checks: {len(results['sanity']) - len(failed)} of {len(results['sanity'])} pass"]
    for c in failed:
        lines.append(
            f"   FAILED {c['variant']} seed {c['seed']}: {c['check']} = {c['value']:.3g} (expected {c['expected']})"
        )
    if diffs := {n: e["max_abs_diff"] for n, e in results["export"].items() if e}:
        worst = max(diffs, key=diffs.get)
        lines.append(
            f"ResidualGPT vs its TransformerLens export, same hooks: largest |loss difference| "
            f"{diffs[worst]:.2e} ({worst})"
        )
    return "\n".join(lines)


# ----- figures ---------------------------------------------------------------------------------------------


def _interval_heatmap(z, x, y, hover, title: str, height: int, colorbar: str, **scale):
    """A heatmap of means, each cell's interval on hover, the first row on top."""
    from interp.figures.plots import heatmap

    template = "%{y}, %{x}<br>%{customdata}<extra></extra>"
    return heatmap(
        z,
        x,
        y,
        title=title,
        height=height,
        customdata=hover,
        hovertemplate=template,
        colorbar=dict(title=colorbar),
        **scale,
    )


def loss_heatmap(name: str, v: dict[str, Any]):
    """Layer x intervention heatmap of the change in loss, the interval on hover."""
    rows = [(label, cells) for label, cells in rows_of(name, v) if cells is not None and "patch" not in label]
    z = [[c["mean"] for c in cells] for _, cells in rows]
    text = [[f"{c['mean']:+.3f} nats<br>95% CI [{c['lo']:+.3f}, {c['hi']:+.3f}]" for c in cells] for _, cells in rows]
    layers = [f"layer {i}" for i in range(len(z[0]))] if z else []
    title = (
        f"{name}: change in validation loss per layer and intervention (clean {v['effects']['clean_loss']['mean']:.3f})"
    )
    return _interval_heatmap(
        z, layers, [label for label, _ in rows], text, title, 120 + 45 * len(rows), "change in loss",
        colorscale="RdBu_r", zmid=0, texttemplate="%{z:+.2f}",
    )  # fmt: skip


def patching_map(name: str, v: dict[str, Any]):
    """Head x layer map of the fraction of the previous-token loss gap that patching one head's z restores."""
    p = v["effects"]["patching"]
    grid = p["heads"]
    if grid is None or any(c is None for row in grid for c in row):
        return None
    z = [[c["mean"] for c in row] for row in grid]
    text = [[f"{c['mean']:.3f} restored<br>95% CI [{c['lo']:.3f}, {c['hi']:.3f}]" for c in row] for row in grid]
    title = (
        f"{name}: previous-token patching per head (clean loss at T {p['clean_loss']:.3f}, "
        f"corrupted {p['corrupt_loss']:.3f})"
    )
    heads, layers = [f"head {h}" for h in range(len(z[0]))], [f"layer {i}" for i in range(len(z))]
    return _interval_heatmap(
        z, heads, layers, text, title, 160 + 50 * len(z), "restored",
        colorscale="Viridis", zmin=0, zmax=1, texttemplate="%{z:.2f}",
    )  # fmt: skip


def identity_flow(results: dict[str, Any]):
    """Current- and previous-token probe CE at each layer's resid_post, clean and under the interventions."""
    from plotly.subplots import make_subplots

    from interp.figures.plots import PALETTE

    fig = make_subplots(rows=1, cols=2, subplot_titles=["current token (offset 0)", "previous token (offset -1)"])
    colour = 0
    for name, v in results["variants"].items():
        layers = v["effects"]["layers"]
        first = next((rows for rows in layers.values() if rows and "identity" in rows[0]), None)
        if first is None:
            continue
        x = [f"{i}.post" for i in range(len(first))]
        series = {"clean": [r["identity"]["clean_ce"] for r in first]}
        series.update({i: [r["identity"]["ce"] for r in layers[i]] for i in IDENTITY_FLOW if layers.get(i)})
        for label, values in series.items():
            for j in range(2):
                fig.add_scatter(
                    x=x,
                    y=[val[j] for val in values],
                    mode="lines+markers",
                    name=f"{name}: {label}",
                    legendgroup=f"{name}: {label}",
                    showlegend=j == 0,
                    line=dict(color=PALETTE[colour % len(PALETTE)], dash="solid" if label == "clean" else "dot"),
                    hovertemplate=f"{name}: {label}<br>%{{x}}<br>probe CE %{{y:.3f}}<extra></extra>",
                    row=1,
                    col=j + 1,
                )
        colour += 1
    fig.update_yaxes(title_text="decoder cross-entropy (nats)", row=1, col=1)
    title = "Identity flow: decodability at the site after the intervened layer (decoders fitted on the clean model)"
    fig.update_layout(title=title, height=520)
    return fig


def sections(results: dict[str, Any], ctx: Context) -> list:
    out: list = [("Verdicts", None, None)]
    out += [
        f"{v['id']} {v['title']}: {v['verdict'].upper()} ({bearing(v)}). Predicted: {v['prediction']}. "
        f"Measured: {v['measured']}. Interval: {v['interval']}. Rule: {v['rule']}."
        for v in results["verdicts"]
    ]
    out.append(("Sanity checks", None, None))
    out += [
        f"{'ok' if c['ok'] else 'FAILED'}: {c['variant']} seed {c['seed']}: {c['check']} = {c['value']:.3g} "
        f"(expected {c['expected']})"
        for c in results["sanity"]
    ]
    if diffs := {n: e for n, e in results["export"].items() if e}:
        each = "; ".join(f"{n}: {e['max_abs_diff']:.2e}" for n, e in diffs.items())
        text = (
            "The same hooks on the first seed's model and its TransformerLens "
            f"export (interp.load_tl), first validation batch: largest |per-sequence loss difference| - {each}."
        )
        out.append(("ResidualGPT and its export", text, None))
    for name, v in results["variants"].items():
        out.append((f"{name}: effects", loss_heatmap(name, v)))
        fig = patching_map(name, v)
        if fig is not None:
            out.append((f"{name}: patching", fig))
    if results.get("identity_probes"):
        out.append(("Identity flow", identity_flow(results)))
    return out
