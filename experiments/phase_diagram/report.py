"""The phase diagram's console table and summary, and its report sections (heatmaps, predictor figures).

Reads results.json's dict (experiments.phase_diagram's analyse) and writes text or figures; nothing here
decides (places and sentences: experiments.phase_diagram.boundary; the predictor test:
experiments.phase_diagram.collapse_predictor).
"""

from __future__ import annotations

from typing import Any

from experiments.phase_diagram.boundary import SHORT, fmt, mark
from experiments.phase_diagram.collapse_predictor import EARLY_FEATURES, verdict_text
from experiments.phase_diagram.grid import CONFIRM_FACTOR, CONFIRM_SEEDS, LABELS
from experiments.runner.frame import Context
from experiments.runner.text import fmt_number, format_table, predictor_cells, table_figure

PREDICTOR_HEADERS = ["feature", "runs", "collapsed", "LOO accuracy", "95% (exact)", "majority"]
PREDICTOR_HEADERS += ["AUC [95% bootstrap], direction", "predicts"]


def _loss(s: dict[str, float]) -> str:
    return f"{s['mean']:.3f}" + (f" +/- {s['std']:.3f}" if s["n"] > 1 else "")


def confirm_mark(cell: dict[str, Any]) -> str:
    c = cell.get("confirm")
    if c:
        return f"{mark(c)} {_loss(c['final_val_loss'])}"
    return "boundary: not run" if cell.get("boundary") else ""


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    confirmed = f"{CONFIRM_SEEDS} seeds at {CONFIRM_FACTOR}x"
    headers = ["cell", "role", "final val", "rel", "place", "at 3x", confirmed, "grad0", "identity early"]
    feats = {(r["variant"], r["seed"]): r["features"] for r in results["runs"]}
    rows = []
    for c in results["cells"]:
        f = feats.get((c["name"], c["seeds"][0]), {}) if c["seeds"] else {}
        at_3x = f"{c['projected_val_loss']['mean']:.3f}"
        row = [c["name"], c["role"], _loss(c["final_val_loss"]), f"{c['relative_loss']:+.2f}", mark(c), at_3x]
        early = [fmt_number(f.get("grad0"), ".3g"), fmt_number(f.get("identity_early"), ".2f")]
        rows.append([*row, confirm_mark(c), *early])
    return headers, rows


def reference_places(results: dict[str, Any]) -> list[str]:
    """Each reference residual's places, depth by depth: 'full: depth 1 width 64 context, ...'."""
    by: dict[str, list[str]] = {}
    for c in results["cells"]:
        if c["role"] == "reference":
            x = c["coords"]
            by.setdefault(x["residual"], []).append(f"depth {x['n_layers']} width {x['d_model']} {mark(c)}")
    return [f"{name}: {', '.join(items)}" for name, items in by.items()]


def changes(results: dict[str, Any]) -> list[str]:
    """What the confirmation runs changed: one line per confirmed cell whose place moved."""
    return [f"{c['name']}: {mark(c)} -> {mark(c['confirm'])}" for c in results["cells"] if c.get("changed")]


def changed_text(results: dict[str, Any]) -> str:
    return (
        f"({CONFIRM_SEEDS} seeds at {CONFIRM_FACTOR}x the steps) changed: {'; '.join(changes(results)) or 'no place'}"
    )


def summary(results: dict[str, Any]) -> str:
    m = results["margin"]
    lines = [
        f"place (margin {m} nats), read per run, never on an average: floor if loss >= unigram - m; bigram if "
        "|loss - bigram| <= m; between; near full if <= full + m; else context (below bigram). "
        "'?' provisional (a 3x projection sits elsewhere); split: the seeds disagree; rel = (loss - bigram) / "
        "(unigram - bigram)",
        "",
        "boundary:",
    ]
    lines += [f"  {s}" for s in results["boundary"]]
    lines += [f"  reference {line}" for line in reference_places(results)]
    lines.append("\nplaces by slice (first pass -> 3 seeds at 3x where confirmed):")
    cells = by_coords(results)
    lines += ["\n" + grid_text(v, cells) for v in results["views"] if v["x"]]
    provisional = [c["name"] for c in results["cells"] if c["final_provisional"]]
    split = [c["name"] for c in results["cells"] if c["final_place"] == "seed-split"]
    lines.append(f"\nprovisional cells: {', '.join(provisional) or 'none'}")
    lines.append(f"seed-split cells: {', '.join(split) or 'none'}")
    if results["confirm"]:
        lines.append(f"confirmation {changed_text(results)}")
    lines.append("\nearly-training predictor of collapse, on held-out runs:")
    pred = results["predictor"]
    lines += [f"  {verdict_text(n, pred[n])}" for n in EARLY_FEATURES if n in pred]
    if not any(item.get("predicts") for item in pred.values()):
        lines.append("  no early feature predicts collapse beyond the majority class on held-out runs")
    if results.get("predictor_final"):
        lines.append(
            f"  against the final places ({CONFIRM_SEEDS} seeds at {CONFIRM_FACTOR}x where confirmed; "
            "seed-split cells left out):"
        )
        final = results["predictor_final"]
        lines += [f"    {verdict_text(n, final[n])}" for n in EARLY_FEATURES if n in final]
    return "\n".join(lines)


# ----- report sections ---------------------------------------------------------------------------------


def by_coords(results: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    return {tuple(sorted(c["coords"].items())): c for c in results["cells"]}


def view_cells(view: dict[str, Any], cells: dict[tuple, dict[str, Any]]) -> list[list[dict[str, Any] | None]]:
    """The view's cells row by row (y), column by column (x); None where a cell was not run."""

    def cell_at(xv, yv) -> dict[str, Any] | None:
        coords = {**view["fixed"], "residual": view["residual"]}
        coords.update((axis, v) for axis, v in ((view["x"], xv), (view["y"], yv)) if axis)
        return cells.get(tuple(sorted(coords.items())))

    return [[cell_at(xv, yv) for xv in view["xs"]] for yv in view["ys"]]


def cell_label(c: dict[str, Any] | None) -> str:
    """A cell's place, and its confirmed place after '->' where confirmation ran."""
    if not c:
        return "not run"
    return mark(c) + (f" -> {mark(c['confirm'])}" if c.get("confirm") else "")


def grid_text(view: dict[str, Any], cells: dict[tuple, dict[str, Any]]) -> str:
    """One view as a text table: a row per y value, a column per x value, each cell's label."""
    x, y = LABELS.get(view["x"], "") if view["x"] else "", LABELS.get(view["y"], "") if view["y"] else ""
    headers = [f"{y} \\ {x}" if y else x, *[fmt(v) for v in view["xs"]]]
    rows = [
        ["" if yv is None else fmt(yv), *[cell_label(c) for c in row]]
        for yv, row in zip(view["ys"], view_cells(view, cells), strict=True)
    ]
    return f"{view['title']}\n" + format_table(headers, rows)


def view_heatmap(view: dict[str, Any], cells: dict[tuple, dict[str, Any]]):
    """One view: colour = relative loss, text = place (confirmed place after '->' where confirmation ran)."""
    from interp.figures.plots import heatmap

    grid = view_cells(view, cells)
    ys = [str(v) for v in view["ys"]]
    fig = heatmap(
        [[c["relative_loss"] if c else None for c in row] for row in grid],
        [str(v) for v in view["xs"]],
        ys,
        title=view["title"],
        height=160 + 60 * len(ys),
        top_first=False,
        text=[[cell_label(c) for c in row] for row in grid],
        texttemplate="%{text}",
        zmin=-0.5,
        zmax=1.1,
        colorscale="RdBu_r",
        colorbar=dict(title="(loss - bigram)<br>/ (unigram - bigram)"),
        hovertemplate="%{x}, %{y}: rel %{z:.2f}, %{text}<extra></extra>",
    )
    fig.update_xaxes(type="category", title=LABELS.get(view["x"], "") if view["x"] else "")
    fig.update_yaxes(type="category", title=LABELS.get(view["y"], "") if view["y"] else "")
    fig.update_layout(margin=dict(l=60, r=20, t=50, b=50))
    return fig


def predictor_figures(results: dict[str, Any]) -> list:
    """Each early feature against the run's relative final loss, collapsed runs marked."""
    import plotly.graph_objects as go

    rel = {(r["variant"], r["seed"]): r["final_val_loss"] for r in results["runs"]}
    levels = results["reference_levels"]
    span = levels["unigram"] - levels["bigram"]
    out = []
    for name in EARLY_FEATURES:
        pts = []
        for s in results["predictor_runs"]:
            if s["features"].get(name) is not None:
                relative = (rel[(s["variant"], s["seed"])] - levels["bigram"]) / span
                pts.append((s["features"][name], relative, s["collapsed"], f"{s['variant']} seed {s['seed']}"))
        if not pts:
            continue
        fig = go.Figure()
        for flag, colour in ((True, "#c0392b"), (False, "#2c7fb8")):
            sel = [p for p in pts if p[2] == flag]
            fig.add_scatter(
                x=[p[0] for p in sel],
                y=[p[1] for p in sel],
                mode="markers",
                text=[p[3] for p in sel],
                name="collapsed" if flag else "not collapsed",
                marker=dict(color=colour, size=9),
            )
        fig.update_layout(title=f"{name} vs outcome", xaxis_title=name, yaxis_title="relative final loss", height=380)
        out.append((f"Predictor: {name}", verdict_text(name, results["predictor"][name]), fig))
    return out


def sections(results: dict[str, Any], ctx: Context) -> list:
    cells = by_coords(results)
    out: list = [("Boundary", None, None)]
    out += list(results["boundary"])
    out += [f"Reference {line}." for line in reference_places(results)]
    if results["confirm"]:
        out.append(f"Confirmation {changed_text(results)}.")
    legend = ", ".join(f"{v} = {k}" for k, v in SHORT.items())
    out.append(
        f"Each cell: colour = (loss - bigram) / (unigram - bigram) (1: floor, 0: bigram); text = its place "
        f"({legend}; '?' provisional), and '-> place' its place with {CONFIRM_SEEDS} seeds at "
        f"{CONFIRM_FACTOR}x the steps where it was confirmed."
    )
    out += [(v["title"], view_heatmap(v, cells)) for v in results["views"]]
    titles = [
        ("predictor", "Early-training predictor (held-out runs; first-pass outcomes)"),
        ("predictor_final", "The same, against the final places (seed-split cells left out)"),
    ]
    for key, title in titles:
        if not results.get(key):
            continue
        rows = [
            [n, item["n"], item["n_collapsed"], *predictor_cells(item, "collapse", ("loo_accuracy", "loo_interval"))]
            for n, item in results[key].items()
        ]
        out.append((title, table_figure(PREDICTOR_HEADERS, rows)))
    return out + predictor_figures(results)
