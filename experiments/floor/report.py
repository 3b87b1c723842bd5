"""The floor's report: the initialisation table as a figure and as rows."""

from __future__ import annotations

from typing import Any

SWEEP_LABEL = {"depth": "depth", "width": "width", "n_ctx": "context"}


def init_figure(results: dict[str, Any]):
    import plotly.graph_objects as go

    init = results["init"]
    fig = go.Figure()
    for config in dict.fromkeys(c["config"] for c in init["cells"]):
        row = [c for c in init["cells"] if c["sweep"] == "depth" and c["config"] == config]
        r = [c["residual"] for c in row]
        fig.add_trace(
            go.Scatter(
                x=[c["depth"] for c in row],
                y=[v["mean"] for v in r],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [v["upper"] - v["mean"] for v in r],
                    "arrayminus": [v["mean"] - v["lower"] for v in r],
                },
                mode="lines+markers",
                name=config,
            )
        )
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
    headers = ["sweep", "configuration", "depth", "width", "context", "residual [95%]", "cosine", "erank"]
    rows = []
    for c in results["init"]["cells"]:
        r = c["residual"]
        rows.append(
            [
                SWEEP_LABEL[c["sweep"]],
                c["config"],
                str(c["depth"]),
                str(c["width"]),
                str(c["n_ctx"]),
                f"{r['mean']:.3f} [{r['lower']:.3f}, {r['upper']:.3f}]",
                f"{c['cosine']['mean']:.3f}",
                f"{c['erank']['mean']:.1f}",
            ]
        )
    return headers, rows
