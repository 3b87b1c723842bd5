"""The floor's console text and report: the arms' table, the verdicts, the initialisation table and figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from experiments.floor.deep import confirm_line, deep_summary, grad_table_rows
from experiments.floor.law_part import law_lines
from experiments.floor.predictions import not_its_runs, step_text
from experiments.runner.frame import Context

SWEEP_LABEL = {"depth": "depth", "width": "width", "n_ctx": "context", "qk_scale": "query/key scale"}


def init_figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    init = results["init"]
    fig = go.Figure()
    for config in dict.fromkeys(c["config"] for c in init["cells"]):
        row = [c for c in init["cells"] if c["sweep"] == "depth" and c["config"] == config]
        r = [c["residual"] for c in row]
        up, down = [v["upper"] - v["mean"] for v in r], [v["mean"] - v["lower"] for v in r]
        error = {"type": "data", "symmetric": False, "array": up, "arrayminus": down}
        depths, means = [c["depth"] for c in row], [v["mean"] for v in r]
        fig.add_trace(go.Scatter(x=depths, y=means, error_y=error, mode="lines+markers", name=config))
    base = init["base"]
    fig.update_layout(
        title=f"Token diversity at initialisation (width {base['d_model']}, context {base['n_ctx']}, "
        f"{len(init['seeds'])} seeds)",
        xaxis_title="depth",
        yaxis_title="residual ||X - mean_t X|| / ||X||, last resid_post",
        yaxis_type="log",
    )
    return fig


def init_rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["sweep", "configuration", "depth", "width", "context", "qk scale", "residual [95%]", "cosine", "erank"]
    rows = []
    for c in results["init"]["cells"]:
        r = c["residual"]
        shape = [str(c["depth"]), str(c["width"]), str(c["n_ctx"]), f"{c.get('scale', 1.0):g}"]
        residual = f"{r['mean']:.3f} [{r['lower']:.3f}, {r['upper']:.3f}]"
        measures = [residual, f"{c['cosine']['mean']:.3f}", f"{c['erank']['mean']:.1f}"]
        rows.append([SWEEP_LABEL[c["sweep"]], c["config"], *shape, *measures])
    return headers, rows


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    key = f"{results['margin']:g}"
    headers = ["arm", "runs", "escaped", "median escape [95%]", "on floor at end", "plateau", "u at init"]
    rows = []
    for c in results["cells"]:
        m = c["median"]
        interval = f"[{step_text(m['lower'])}, {step_text(m['upper'])}]"
        med = "past end" if m["median"] is None else f"{m['median']:.0f} {interval}"
        s = c["survival_at_last"]
        p = c["plateau"][key]
        floor = f"{s[0]:.2f} [{s[1]:.2f}, {s[2]:.2f}]"
        plateau = f"{p['word']} ({p['n_waits']}/{p['n']}, {p['median_time']:.0f} steps)"
        rows.append([c["name"], str(c["n"]), str(c["n_escaped"]), med, floor, plateau, f"{c['u_mean']:.3f}"])
    return headers, rows


def summary(results: dict[str, Any]) -> str:
    lines = []
    rel = results["relation"]
    if rel.get("fitted"):
        b = rel["b"]
        lines.append(
            f"relation (controls, {rel['n_runs']} runs, {rel['n_escaped']} escaped): log T = "
            f"{rel['a']['value']:.2f} + {b['value']:.2f} [{b['lower']:.2f}, {b['upper']:.2f}] u, sigma "
            f"{rel['sigma']['value']:.2f}"
        )
    else:
        lines.append(f"relation: not fitted ({rel.get('why')})")
    lines += [knob_line(name, k) for name, k in results["knob"].items()]
    confirm = [c for c in results["cells"] if c["part"] == "confirm"]
    lines += [confirm_line(c, "the knob " if c["scale"] != 1.0 else "") for c in confirm]
    lines += [transfer_line(name, t) for name, t in results["transfer"].items()]
    lines += law_lines(results)
    rates = results["init"]["rates"]
    if rates:
        lines.append(
            "at initialisation, residual per layer: "
            + "; ".join(f"{c} x{r['rate']:.2f} [{r['lower']:.2f}, {r['upper']:.2f}]" for c, r in rates.items())
        )
    f = results.get("factor")
    if f and f.get("factor"):
        shallow, deeper = f["depths"]
        lines.append(f"controls: the median wait grows x{f['factor']:.1f} a layer (depth {shallow} to {deeper})")
    for outcome, feats in (
        ("by the end", results.get("early")),
        (f"by step {results.get('early_horizon')}", results.get("early_by_horizon")),
    ):
        if feats and next(iter(feats.values()))["n"]:  # none without control runs (e.g. --parts deep)
            lines.append(early_line(results.get("early_step"), outcome, feats))
    al = results["alignment"]
    if al["order"]:
        lines.append(
            f"first to move around the escape ({al['n_escaped']} escapes): "
            + ", ".join(f"{n} {lead:+.0f} ({k} runs)" for n, lead, k in al["order"][:4])
        )
    lines += deep_summary(results)
    return "\n".join(lines)


def knob_line(name: str, k: dict[str, Any]) -> str:
    p, o, h = k["prediction"], k["observed"], k["held"]
    if not p.get("predicted"):
        return f"{name}: no prediction ({p.get('why')})"
    when = "written before training" if k["written_before_training"] else "NOT written before training"
    if k.get("edited"):
        when = "EDITED in predictions-floor.json after it was written: not the prediction made before training"
    when += not_its_runs(k)
    verdict = "held" if h["held"] else "failed"
    obs = f"observed median {step_text(o['median'])}, {o['floor_at_last']:.2f} on the floor"
    pm = f"predicted median [{step_text(p['median']['lower'])}, {step_text(p['median']['upper'])}]"
    pf = f"on the floor [{p['floor_interval'][0]:.2f}, {p['floor_interval'][1]:.2f}]"
    lr = "" if k["logrank_p"] is None else f"; log-rank against {k['control']} p = {k['logrank_p']:.2g}"
    return f"{name}: prediction {verdict} ({when}): {pm}, {pf}; {obs} ({o['n']} runs){lr}"


def early_line(step: int | None, outcome: str, feats: dict[str, Any]) -> str:
    """One line: each feature at the early step as a held-out predictor of escape (deepest control depth)."""
    first = next(iter(feats.values()))
    head = f"early predictor at step {step} of escape {outcome} ({first['n_escaped']} of {first['n']} runs): "
    tested = [f for f in feats.values() if "accuracy" in f]
    if not tested:
        return head + str(first.get("untestable"))
    parts = [
        f"{name} {f['accuracy']:.2f} [{f['interval'][0]:.2f}, {f['interval'][1]:.2f}] AUC {f['auc']:.2f}"
        if "accuracy" in f
        else f"{name} untestable ({f.get('untestable')})"
        for name, f in feats.items()
    ]
    return head + "; ".join(parts) + f" (held-out accuracy; majority {tested[0]['majority_accuracy']:.2f})"


def transfer_line(name: str, t: dict[str, Any]) -> str:
    p, o, h = t["prediction"], t["observed"], t["held"]
    if not p.get("predicted"):
        return f"{name}: the controls' relation predicts nothing ({p.get('why')})"
    return (
        f"{name}: the ffn_only relation {'holds' if h['held'] else 'fails'}: predicted median "
        f"[{step_text(p['median']['lower'])}, {step_text(p['median']['upper'])}], observed {step_text(o['median'])} "
        f"({o['n']} runs)"
    )


def sections(results: dict[str, Any], ctx: Context) -> list:
    from experiments.runner.text import table_figure
    from interp.files.io import atomic_write

    svg = ctx.result_dir / "init-floor.svg"  # beside the report: the depth sweep, static
    atomic_write(svg, lambda tmp: Path(tmp).write_text(init_svg(results)))
    headers, rows = init_rows(results)
    said = f"residual at the last resid_post, mean over seeds [95% t interval] (static figure: {svg.name})"
    out = [("Summary", summary(results), None), ("At initialisation", said, init_figure(results))]
    out.append(table_figure(headers, rows))
    deep = results.get("deep")
    for part, what in (("mlp", "MLP parameters"), ("attn", "attention parameters"), ("resid", "dLoss/d(resid_pre)")):
        if deep and deep["grad_table"]:
            title = f"The deep part: per layer, the gradient norm of the {what} (median over runs, before clipping)"
            out.append(table_figure(*grad_table_rows(deep, part), title))
    return out


def init_svg(results: dict[str, Any], width: int = 680, height: int = 300) -> str:
    """The depth sweep at initialisation as a small self-contained SVG (log residual against depth): the
    figure for a README, beside the interactive report."""
    from experiments.runner.svg import line_chart

    init = results["init"]
    cells = [c for c in init["cells"] if c["sweep"] == "depth"]
    configs = list(dict.fromkeys(c["config"] for c in cells))
    depths = sorted({c["depth"] for c in cells})
    lo = math.floor(math.log10(max(min(c["residual"]["mean"] for c in cells), 1e-6)))
    left, right, top, bottom = 50, 230, 20, 40
    w, h = width - left - right, height - top - bottom

    def xy(depth: float, r: float) -> str:
        x = left + w * (depth - depths[0]) / max(depths[-1] - depths[0], 1)
        y = top + h * (0 - math.log10(max(r, 10.0**lo))) / -lo if lo < 0 else top
        return f"{x:.1f},{y:.1f}"

    ticks = []
    for d in depths:
        x = xy(d, 1.0).split(",")[0]
        ticks.append(f'<text x="{x}" y="{top + h + 14}" text-anchor="middle">{d}</text>')
    for k in range(lo, 1):
        y = xy(depths[0], 10.0**k).split(",")[1]
        ticks.append(f'<text x="{left - 6}" y="{float(y) + 4:.1f}" text-anchor="end">{10.0**k:g}</text>')
    lines = []
    for config in configs:
        row = sorted((c for c in cells if c["config"] == config), key=lambda c: c["depth"])
        rate = init["rates"].get(config)
        label = config + (f" (x{rate['rate']:.2f}/layer)" if rate else "")
        lines.append(([xy(c["depth"], c["residual"]["mean"]) for c in row], label, ""))
    titles = ("depth (layers)", "token diversity at init (residual)")
    return line_chart(width, height, (left, top, w, h), ticks, titles, lines)
