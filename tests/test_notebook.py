"""Issue 45: docs/notebook.py (the notebook, jupytext percent format) runs top to bottom in a Jupyter kernel, and
its plotly figures carry plotly.js with them (offline), not a link to a CDN; issue 50: nor MathJax's.

The notebook trains a smoke model, so one module-scoped execution serves both tests (about 15 s of it is the
kernel's imports and the training).
"""

import re

import jupytext
import nbclient
import pytest
from conftest import REPO, data_root
from offline import external_references

NOTEBOOK = REPO / "docs" / "notebook.py"
CELL_TIMEOUT_S = 120  # per cell; the whole notebook takes seconds on 2 CPU cores


@pytest.fixture(scope="module")
def executed():
    """The notebook after nbclient ran every cell in a fresh python3 kernel, from docs/ as JupyterLab does."""
    nb = jupytext.read(NOTEBOOK)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDUAL_DATA_DIR", str(data_root()))  # the kernel inherits it: real or synthetic corpus
        client = nbclient.NotebookClient(
            nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
        )
        client.execute()  # CellExecutionError (with the cell's traceback) on any cell that raises
    return nb


def html_outputs(nb) -> list[str]:
    return [
        "".join(out["data"]["text/html"])
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "text/html" in out.get("data", {})
    ]


def test_every_cell_runs(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)  # each one ran (an error would have raised above)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "final val loss" in text and "escaped, median" in text  # the first and the last step printed


def test_figures_embed_plotly_js(executed):
    from plotly.offline import get_plotlyjs

    pages = html_outputs(executed)
    figures = [p for p in pages if "plotly-graph-div" in p]
    assert len(figures) >= 2  # the attention patterns and the survival curve
    assert any(get_plotlyjs() in p for p in pages)  # the library itself, in the notebook
    # plotly's own "notebook" renderer adds MathJax from a CDN to every figure: nothing may be fetched, that included
    assert not [url for p in pages for url in external_references(p)]


def test_source_is_what_jupytext_writes():
    """JupyterLab's save (jupytext pairing) rewrites docs/notebook.py: it must come back as it is in git, so opening
    and saving leaves no diff (ruff format and jupytext agree on the file). Only the writer's version may differ."""
    text = NOTEBOOK.read_text()
    written = jupytext.writes(jupytext.reads(text, fmt="py:percent"), fmt="py:percent")
    version = re.compile(r"(?m)^#\s+jupytext_version: .*$")
    assert version.sub("", written) == version.sub("", text)
