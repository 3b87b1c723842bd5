"""Issue 50: every page the project writes renders offline and asks nothing of the network (tests/offline.py).

The pages are save_html's (every experiment's report, python -m interp.plot_attention) and the notebook's figures
(tests/test_notebook.py). Here: save_html on every kind of item, a figure whose LaTeX text would call MathJax
included; the plot_attention page; and, read from the source, that nothing else in the project writes a page.
The experiments' own tests scan their reports with the same check.
"""

from __future__ import annotations

import ast

import plotly.graph_objects as go
import pytest
import torch
from conftest import REPO
from offline import external_references

from interp import ModelConfig, ResidualGPT, save_checkpoint
from interp.figures.plot_page import Table, save_html

SOURCES = ("interp", "probes", "training", "experiments", "benchmarks")
PAGE_WRITER = "interp/figures/plot_page.py"


def test_the_check_finds_what_a_page_would_fetch():
    page = (
        '<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.5/MathJax.js"></script>'
        '<link rel="stylesheet" href="//fonts.example/css"><style>@import "https://x/y.css"</style>'
        '<div style="background:url(http://x/a.png)"></div><script type="module">import "https://cdn.plot.ly/p"</script>'
    )
    assert len(external_references(page)) == 5
    offline = '<a href="https://arxiv.org">a link</a><script>var tiles = "https://tile.example/{z}";</script>'
    assert external_references(offline) == []  # a link the reader follows, a library's text: no request


def test_save_html_asks_nothing_of_the_network(tmp_path):
    latex = go.Figure(go.Scatter(y=[1, 2]), layout={"title": {"text": r"$\alpha_{tt}$"}})  # MathJax would typeset
    items = ["A paragraph.", ("Heading", latex), ("H", "text", Table(["a"], [["1"]])), go.Figure(go.Bar(y=[1]))]
    page = save_html(items, tmp_path / "page.html").read_text(encoding="utf-8")
    assert "Plotly.newPlot(" in page and external_references(page) == []


def test_the_plot_attention_page_asks_nothing_of_the_network(tmp_path, capsys):
    from interp.plot_attention import main

    torch.manual_seed(0)
    model = ResidualGPT(ModelConfig(n_layers=2, d_model=16, n_heads=2, n_ctx=8, d_vocab=4))
    save_checkpoint(tmp_path / "ckpt.pt", model, vocab=list("ab\n "))
    assert main(["--ckpt", str(tmp_path / "ckpt.pt"), "--text", "ab\nb", "--out", str(tmp_path / "a.html")]) == 0
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert page.count("Plotly.newPlot(") == 2 and external_references(page) == []


def _page_writes(path) -> list[str]:
    """Where a module writes HTML itself: plotly's to_html / write_html / show / offline.plot, or an <html> literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            offline_plot = node.func.attr in ("plot", "iplot") and "offline" in ast.unparse(node.func.value)
            if node.func.attr in ("to_html", "write_html", "show") or offline_plot:
                found.append(f"{node.func.attr}() line {node.lineno}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "<html" in node.value.lower():
            found.append(f"an <html> page line {node.lineno}")
    return found


def test_every_page_the_project_writes_is_save_htmls():
    """One writer of pages: a module that wrote its own would need the check above again (it is where plotly's
    include_mathjax="cdn" or include_plotlyjs="cdn" would come in)."""
    writers = {
        str(p.relative_to(REPO)): found
        for top in SOURCES
        for p in sorted((REPO / top).rglob("*.py"))
        if str(p.relative_to(REPO)) != PAGE_WRITER and (found := _page_writes(p))
    }
    assert not writers, writers


def test_the_shipped_figures_ask_nothing_of_the_network():
    """The SVG figures the result pages show (experiments.runner.svg)."""
    figures = sorted((REPO / "docs" / "results").rglob("*.svg"))
    assert figures and not {str(p): refs for p in figures if (refs := external_references(p.read_text()))}


@pytest.mark.parametrize("renderer", ["notebook", "notebook_connected"])
def test_the_notebooks_renderer_is_offline_where_plotlys_own_is_not(renderer):
    """The notebook uses interp.figures.plot_page.offline_notebook_renderer(); plotly's "notebook" adds MathJax
    from a CDN."""
    import plotly.io as pio

    from interp.figures.plot_page import offline_notebook_renderer

    fig = go.Figure(go.Scatter(y=[1, 2]))
    theirs = pio.renderers[renderer].to_mimebundle(fig.to_dict())["text/html"]
    ours = pio.renderers[offline_notebook_renderer()].to_mimebundle(fig.to_dict())["text/html"]
    assert external_references(theirs) and "Plotly.newPlot(" in ours and external_references(ours) == []
