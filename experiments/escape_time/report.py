"""The escape-time table, console summary and report.html sections.

Reads results.json's dict (experiments.escape_time.run's analyse); decides nothing.
"""

from __future__ import annotations

from typing import Any

from experiments.escape_time.escape_predictor import verdict_line
from experiments.runner.frame import Context
from experiments.runner.text import predictor_cells, table_figure


def _step(x: float | None, last: int) -> str:
    return f">{last}" if x is None else f"{x:.0f}"


def median_text(cell: dict[str, Any]) -> str:
    return _median(cell["median"], cell["last_step"])


def _median(m: dict[str, Any], last: int) -> str:
    """A median escape step and its interval, each '>last' where past the last step."""
    return f"{_step(m['median'], last)} [{_step(m['lower'], last)}, {_step(m['upper'], last)}]"


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["cell", "role", "runs", "escaped", "median escape step [95%]", "on the floor at the end [95%]"]
    headers += [f"median at margin {m}" for m in results["margins_text"]]
    rows = []
    order = {"grid": 0, "holdout": 1, "reference": 2}
    for c in sorted(results["cells"], key=lambda c: (order[c["role"]], c["residual"], c["n_layers"], c["lr"])):
        s, lo, hi = c["survival_at_last"]
        by_margin = [_step(v, c["last_step"]) for v in c["medians_by_margin"].values()]
        floor = f"{s:.2f} [{lo:.2f}, {hi:.2f}]"
        rows.append([c["name"], c["role"], str(c["n"]), str(c["n_escaped"]), median_text(c), floor, *by_margin])
    return headers, rows


def law_text(law: dict[str, Any], margin: str) -> str:
    if not law["fitted"]:
        return f"law at margin {margin}: not fitted ({law['reason']})"
    c = law["coef"]

    def ci(name: str, f=lambda v: v) -> str:
        item = c[name]
        if item["lower"] is None:
            return f"{f(item['value']):.2f}"
        return f"{f(item['value']):.2f} [{f(item['lower']):.2f}, {f(item['upper']):.2f}]"

    import math

    text = f"law at margin {margin}: each layer multiplies the median wait by {ci('per_layer', math.exp)}"
    if law["with_lr"]:
        text += f", each doubling of lr by {ci('per_lr_doubling', math.exp)}"
    elif law.get("lr_left_out"):
        text += f" (lrs pooled: {law['lr_left_out']})"
    runs = f"{law['n_runs']} runs, {law['n_escaped']} escaped, depths {law['depths']}"
    text += f"; spread sigma {ci('sigma')} (log-normal, {runs}"
    if skipped := law.get("n_bootstrap_unfittable"):
        total = law["n_bootstrap"] + skipped
        text += f"; {skipped} of {total} bootstrap resamples had escapes at one depth and are left out of the intervals"
    return text + ")"


def prediction_text(depth: int, lr: float, p: dict[str, Any]) -> str:
    if not p.get("predicted"):
        return f"held-out depth {depth}, lr {lr:g}: no prediction ({p.get('reason')})"
    lo, hi = p["median_interval"]
    slo, shi = p["survival_interval"]
    return (
        f"held-out depth {depth}, lr {lr:g}, predicted from the other depths: median escape step "
        f"{p['median']:.0f} [{lo:.0f}, {hi:.0f}], on the floor at step {p['step']:.0f}: "
        f"{p['survival_at_last']:.2f} [{slo:.2f}, {shi:.2f}]"
    )


def holdout_lines(results: dict[str, Any]) -> list[str]:
    out = []
    for h in results["holdout"]:
        out.append(prediction_text(h["depth"], h["lr"], h["predicted"]))
        o = h["observed"]
        s, lo, hi = o["survival_at_last"]
        out.append(
            f"    observed ({h['n']} runs, {o['n_escaped']} escaped): median {_median(o['median'], h['last_step'])}, "
            f"on the floor at the end {s:.2f} [{lo:.2f}, {hi:.2f}]"
        )
    return out


def mechanism_lines(results: dict[str, Any]) -> list[str]:
    mech = results["mechanism"]
    out = [f"mechanism ({mech['n_escaped']} ffn_only runs escaped): {mech['answer']}"]
    if mech["order"]:
        parts = [f"{name} {lead:+.0f} steps (n={n})" for name, lead, n in mech["order"]]
        out.append("    onset against the escape step, earliest first (median lead): " + "; ".join(parts))
    if mech["n_escaped"] < results["min_runs"]:
        out.append(f"    the order rests on {mech['n_escaped']} runs, fewer than {results['min_runs']}: not settled")
    return out


def summary(results: dict[str, Any]) -> str:
    margin = f"{results['margin']:g}"
    lines = [f"escape: validation loss stays below {results['threshold']:.3f} (unigram - {margin})"]
    lines += [law_text(results["law"][m], m) for m in results["law"]]
    lines += holdout_lines(results)
    lines += mechanism_lines(results)
    at = results["early_step"]
    grad = results.get("gradient_step", at)
    gradient = f" (grad_block0 at step {grad}, the preset's warmup_steps)" if grad != at else ""
    lines.append(f"early predictors of escape at step {at}{gradient} (held out by seed):")
    lines += ["    " + verdict_line(name, item) for name, item in results["predictor"].items()]
    return "\n".join(lines)


def survival_figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    for c in results["cells"]:
        km = c["km"]
        xs = [0, *[s for s in km["steps"] for _ in (0, 1)], c["last_step"]]
        ys = [1.0, 1.0, *[v for v in km["survival"] for _ in (0, 1)]][: len(xs)]
        lo = [1.0, 1.0, *[v for v in km["lower"] for _ in (0, 1)]][: len(xs)]
        hi = [1.0, 1.0, *[v for v in km["upper"] for _ in (0, 1)]][: len(xs)]
        name = f"{c['name']} ({c['role']})"
        band = dict(fill="toself", opacity=0.12, line=dict(width=0), showlegend=False, hoverinfo="skip")
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=hi + lo[::-1], legendgroup=name, **band))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, legendgroup=name))
    title = "Fraction still on the floor (Kaplan-Meier, 95% band)"
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="on the floor", yaxis_range=[0, 1.02], height=520)
    return fig


def law_figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    for lr in results["lrs"]:
        cells = sorted(
            (c for c in results["cells"] if c["residual"] == "ffn_only" and c["lr"] == lr), key=lambda c: c["n_layers"]
        )
        pts = [(c["n_layers"], c["median"]["median"], c["role"]) for c in cells if c["median"]["median"]]
        depths, medians, roles = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
        name = f"observed median, lr {lr:g}"
        fig.add_trace(go.Scatter(x=depths, y=medians, mode="markers+lines", name=name, text=roles))
    for h in results["holdout"]:
        p = h["predicted"]
        if p.get("predicted"):
            lo, hi = p["median_interval"]
            error = dict(type="data", symmetric=False, array=[hi - p["median"]], arrayminus=[p["median"] - lo])
            marker = dict(mode="markers", marker_symbol="diamond-open", marker_size=14, error_y=error)
            name = f"predicted, held-out depth, lr {h['lr']:g}"
            fig.add_trace(go.Scatter(x=[h["depth"]], y=[p["median"]], name=name, **marker))
    fig.update_yaxes(type="log", title="median escape step")
    fig.update_layout(title="Median escape step against depth (log scale)", xaxis_title="depth", height=460)
    return fig


def mechanism_figure(results: dict[str, Any], names: tuple[str, ...]):
    import plotly.graph_objects as go

    mech = results["mechanism"]
    fig = go.Figure()
    for name in names:
        m = mech["measures"][name]
        label = f"{m['label']} (n={m['n_runs']})"
        fig.add_trace(go.Scatter(x=mech["offsets"], y=m["mean_curve"], mode="lines+markers", name=label))
    fig.add_vline(x=0, line_dash="dot")
    title = "Aligned on the escape step (mean over escaped runs)"
    fig.update_layout(title=title, xaxis_title="step - escape step", height=420)
    return fig


def survival_svg(results: dict[str, Any], width: int = 640, height: int = 300) -> str:
    """The ffn_only survival curves as a small self-contained SVG (no plotting package needed): a figure
    for a README or a paper draft, beside the interactive report."""
    from experiments.runner.svg import line_chart

    cells = sorted((c for c in results["cells"] if c["residual"] == "ffn_only"), key=lambda c: (c["lr"], c["n_layers"]))
    last = max((c["last_step"] for c in cells), default=1)
    left, right, top, bottom = 50, 170, 20, 40
    w, h = width - left - right, height - top - bottom

    def xy(step: float, s: float) -> str:
        return f"{left + w * step / last:.1f},{top + h * (1 - s):.1f}"

    ticks = []
    for k in range(0, 5):
        step = last * k / 4
        ticks.append(f'<text x="{left + w * k / 4:.1f}" y="{top + h + 14}" text-anchor="middle">{step:.0f}</text>')
        ticks.append(f'<text x="{left - 6}" y="{top + h * (1 - k / 4) + 4:.1f}" text-anchor="end">{k / 4:.2f}</text>')
    lines = []
    for c in cells:
        dash = "" if c["lr"] == max(results["lrs"]) else ' stroke-dasharray="5,3"'
        points, s = [xy(0, 1.0)], 1.0
        for step, value in zip(c["km"]["steps"], c["km"]["survival"], strict=True):
            points += [xy(step, s), xy(step, value)]
            s = value
        points.append(xy(c["last_step"], s))
        lines.append((points, f"L{c['n_layers']} lr {c['lr']:g} ({c['n_escaped']}/{c['n']})", dash))
    titles = ("training step", "still on the floor")
    return line_chart(width, height, (left, top, w, h), ticks, titles, lines)


def sections(results: dict[str, Any], ctx: Context) -> list:
    from pathlib import Path

    from interp.files.io import atomic_write

    svg = ctx.result_dir / "survival-escape_time.svg"  # beside the report: the same curves, static
    atomic_write(svg, lambda tmp: Path(tmp).write_text(survival_svg(results)))
    first = summary(results).split("\n")[0] + f" (static figure: {svg.name})"
    out: list = [("Survival on the floor", first, survival_figure(results))]
    out.append(("The law", " ".join(law_text(results["law"][m], m) + "." for m in results["law"]), law_figure(results)))
    out += holdout_lines(results)
    alpha = mechanism_figure(results, ("alpha_tt_layer0", "alpha_tt_mean", "identity"))
    out.append(("Mechanism at escape", " ".join(mechanism_lines(results)), alpha))
    out.append(mechanism_figure(results, ("knock_out_self", "self_only", "uniform_pattern")))
    out.append(mechanism_figure(results, ("grad_block0", "growth")))
    out.append(mechanism_figure(results, ("residual_last", "qk_grad")))  # token uniformity (issue 44)
    rows = [[name, str(item["n"]), *predictor_cells(item, "escape")] for name, item in results["predictor"].items()]
    at = results["early_step"]
    title = f"Early predictors (step {at}; grad_block0 at step {results.get('gradient_step', at)}; held out by seed)"
    headers = ["feature", "runs", "accuracy", "95% (exact)", "majority", "AUC", "predicts"]
    out.append((title, table_figure(headers, rows)))
    return out
