"""save_html: figures, tables and paragraphs in ONE self-contained HTML page (plotly.js embedded once).

Table is an HTML table for the page; PlotInputError is what the page and every figure in interp.figures.plots refuse
bad input with; offline_notebook_renderer is the page's rule in a notebook (nothing fetched from the network).
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

import plotly.graph_objects as go
from plotly.io.base_renderers import NotebookRenderer

from interp.errors import ToolkitError
from interp.files.io import atomic_write


class PlotInputError(ToolkitError, ValueError):
    """Data handed to a plot has the wrong shape or type."""


class Table:
    """A table for save_html, written as an HTML <table>: its text selects and searches like the page's, it
    grows with its rows (a plotly table scrolled inside a fixed height and left blank space under short ones)."""

    def __init__(self, headers: Sequence[Any], rows: Sequence[Sequence[Any]], title: str = ""):
        self.headers = [str(h) for h in headers]
        self.rows = [["" if c is None else str(c) for c in row] for row in rows]
        for i, row in enumerate(self.rows):
            if len(row) != len(self.headers):
                raise PlotInputError(f"table row {i} has {len(row)} cells for {len(self.headers)} headers")
        self.title = title

    def to_html(self) -> str:
        cell = html.escape
        caption = f"<caption>{cell(self.title)}</caption>" if self.title else ""
        head = "".join(f"<th>{cell(h)}</th>" for h in self.headers)
        body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in self.rows)
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


Item: TypeAlias = "go.Figure | Table"


def _sections(figures: Any) -> list[tuple[str | None, str | None, Item | None]]:
    """(heading, paragraph, figure or table) triples from a figure, table, string, tuple, or a list of these."""
    items = figures if isinstance(figures, list) else [figures]
    out: list[tuple[str | None, str | None, Item | None]] = []
    for item in items:
        if isinstance(item, (go.Figure, Table)):
            out.append((None, None, item))
        elif isinstance(item, str):
            out.append((None, item, None))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], (go.Figure, Table)):
            out.append((item[0], None, item[1]))
        elif isinstance(item, tuple) and len(item) == 3 and isinstance(item[2], (go.Figure, Table, type(None))):
            out.append(item)
        else:
            raise PlotInputError(
                "save_html takes figures, tables (interp.figures.plots.Table), paragraph strings, (heading, figure) or "
                f"(heading, text, figure) tuples, or a list of these; got {type(item).__name__}"
            )
    return out


def save_html(figures: Any, path: str | Path, title: str = "Figures") -> Path:
    """Write figures into ONE self-contained HTML page (plotly.js embedded once), atomically.

    figures: a Figure, a Table, a paragraph string, (heading, figure), (heading, text,
    figure), or a list of these, in page order. Tables are HTML tables, figures plotly.
    """
    from plotly.offline import get_plotlyjs

    body = [f"<h1>{html.escape(title)}</h1>"]
    for i, (heading, text, fig) in enumerate(_sections(figures)):
        if heading:
            body.append(f"<h2>{html.escape(heading)}</h2>")
        if text:
            body.append(f"<p>{html.escape(text)}</p>")
        if isinstance(fig, Table):
            body.append(fig.to_html())
        elif fig is not None:
            height = f"{fig.layout.height}px" if fig.layout.height else "480px"
            div = fig.to_html(
                full_html=False,
                include_plotlyjs=False,  # loaded once in <head>
                include_mathjax=False,  # MathJax would come from a CDN
                div_id=f"figure-{i}",
                default_height=height,
                config={"displaylogo": False},
            )
            body.append(f'<div class="figure">{div}</div>')
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{html.escape(title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
            "h2{margin-top:1.5em}.figure{margin:1em 0}"
            "table{border-collapse:collapse;margin:1em 0;font-size:.9em;font-variant-numeric:tabular-nums}"
            "th,td{border:1px solid #ccd;padding:.25em .6em;text-align:left;vertical-align:top}"
            "th{background:#e8eef7}caption{text-align:left;font-weight:600;padding:.3em 0}</style>",
            f'<script type="text/javascript">{get_plotlyjs()}</script>',
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
        ]
    )

    def write(tmp: str) -> None:
        Path(tmp).write_text(page, encoding="utf-8")
        os.chmod(tmp, 0o644)  # a report to share, not mkstemp's private 0600

    path = Path(path)
    atomic_write(path, write)
    return path


OFFLINE_NOTEBOOK = "residual_notebook"


class OfflineNotebookRenderer(NotebookRenderer):
    """plotly's "notebook" renderer (plotly.js embedded in the notebook once) less the MathJax <script src> from a
    CDN that it adds to every figure: a figure asks nothing of the network. LaTeX in figure text shows as typed."""

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
        from plotly.io import to_html

        page = to_html(
            fig_dict,
            config=self.config,
            auto_play=self.auto_play,
            include_plotlyjs=False,  # the notebook has it: NotebookRenderer.activate embeds it once
            include_mathjax=False,
            post_script=self.post_script,
            full_html=False,
            animation_opts=self.animation_opts,
            default_width="100%",
            default_height=525,
            validate=False,
        )
        return {"text/html": page}


def offline_notebook_renderer() -> str:
    """The name of OfflineNotebookRenderer among plotly's renderers (registered on the first call), for a notebook:
    pio.renderers.default = "plotly_mimetype+" + offline_notebook_renderer()."""
    import plotly.io as pio

    if OFFLINE_NOTEBOOK not in pio.renderers:
        pio.renderers[OFFLINE_NOTEBOOK] = OfflineNotebookRenderer(config=pio.renderers["notebook"].config)
    return OFFLINE_NOTEBOOK
