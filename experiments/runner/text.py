"""Text every experiment shares: number formatting, the reference-level lines, the runs' curves, tables, software
versions.

Seed and curve statistics are experiments.statistics.stats; the
experiment frame itself (options, runs, results.json, report) is experiments.runner.frame.
"""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Callable
from typing import Any

from experiments.statistics.held_out import auc_text


def num(v: float) -> str:
    """A value as short as %g writes it where that is exact, else in full: distinct values, distinct names
    (and run directories; 0.001 and 0.0010000001 are two cells)."""
    text = f"{v:g}"
    return text if float(text) == v else repr(float(v))


def reference_lines(levels: dict[str, Any]) -> dict[str, float]:
    """The two levels as named horizontal lines for interp.figures.plots.loss_curves."""
    return {"unigram (floor)": levels["unigram"], "bigram (current token only)": levels["bigram"]}


def seed_curves(
    runs: list[dict[str, Any]], curve: str = "val_curve", name: Callable[[dict[str, Any]], str] = lambda r: r["variant"]
) -> dict[str, tuple[list[int], list[float]]]:
    """Each run's logged `curve` for interp.figures.plots.loss_curves, labelled "name/seedN" (one colour a name)."""
    return {f"{name(r)}/seed{r['seed']}": (r[curve]["steps"], r[curve]["loss"]) for r in runs}


def levels_line(levels: dict[str, Any], val_mode: str = "fixed") -> str:
    """The reference levels as one console line that says which text they are of: the preset's fixed validation
    batches, a sample of the validation split, so a small preset's differ from the whole split's (smoke's 1,024
    tokens of TinyShakespeare give unigram 3.312; the whole validation split, which docs/guide.md quotes, 3.347).
    With val_mode "random" the runs validate on other batches than these, and the line says so."""
    n, m = levels.get("n_targets"), levels.get("n_train_tokens")
    scored = f"the {n:,} target tokens" if isinstance(n, int) else "the target tokens"
    counts = f"counts from the train split's {m:,} tokens" if isinstance(m, int) else "train-split counts"
    where = "this preset's fixed validation batches (a sample of the validation split; "
    if val_mode != "fixed":
        where = (
            f"the fixed validation batches (seed 99991; the runs' own validation losses are on fresh random batches "
            f"of the validation split at each evaluation, val_mode={val_mode}; "
        )
    return (
        f"reference levels of {scored} in {where}"
        f"{counts}, add-one smoothing): unigram {levels['unigram']:.3f}, bigram {levels['bigram']:.3f} nats"
    )


def validation_words(val_mode: str) -> str:
    """What the runs' validation loss is measured on, for a report's first lines."""
    if val_mode == "fixed":
        return "Validation loss on the fixed validation batches (seed 99991)."
    return f"Validation loss on fresh random batches of the validation split at each evaluation (val_mode={val_mode})."


def fmt_number(x: float | None, spec: str = ".4f") -> str:
    """One number for a table cell: format(x, spec), or "-" for None, nan and inf."""
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def fmt_stats(s: dict[str, float], digits: int = 3) -> str:
    """Seed statistics (experiments.statistics.stats.stats) for a table cell: the mean alone for one seed, else
    "mean +/- std [min, max]". Every figure goes through format(), so a diverged seed shows as nan."""
    if s["n"] == 1:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} +/- {s['std']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def predictor_cells(item: dict[str, Any], outcome: str, names: tuple[str, str] = ("accuracy", "interval")) -> list[str]:
    """An early predictor's table cells (held_out.held_out_test's item, its accuracy and interval keys `names`):
    held-out accuracy, its 95% interval, majority, AUC (auc_text, `outcome` its verb), predicts (or why untestable)."""
    accuracy, interval = names
    return [
        fmt_number(item.get(accuracy), ".2f"),
        "-" if interval not in item else "[{:.2f}, {:.2f}]".format(*item[interval]),
        fmt_number(item.get("majority_accuracy"), ".2f"),
        auc_text(item, outcome) if "auc" in item else "-",
        "yes" if item.get("predicts") else item.get("untestable", "no"),
    ]


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table for the console: columns padded to their widest cell, a rule under the header."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table_figure(headers: list[str], rows: list[list[Any]], title: str = ""):
    """The same table for report.html: an HTML table (interp.figures.plot_page.Table), its text selectable,
    no inner scroll."""
    from interp.figures.plot_page import Table

    return Table(headers, rows, title)


def software_versions() -> dict[str, str]:
    from importlib.metadata import version

    import numpy
    import plotly
    import torch
    import transformer_lens  # noqa: F401

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformer_lens": version("transformer-lens"),
        "numpy": numpy.__version__,
        "plotly": plotly.__version__,
        "threads": str(torch.get_num_threads()),
    }
