"""Plotly figures for the toolkit's measurements.

Every function takes plain arrays / tensors (or an activation cache), so the
same call works on a ResidualGPT cache and on its HookedTransformer's, and
returns a plotly Figure that shows inline in a notebook. interp.figures.plot_page's save_html writes one
or many figures into a single self-contained page that opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from jaxtyping import Float
from plotly.subplots import make_subplots

from interp.figures.plot_page import PlotInputError

PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)  # fmt: skip


def reference_line(fig, y: float, text: str, colour: str = "#555", **more: Any) -> None:
    """One dashed horizontal line labelled `text`: a reference level, a threshold (more: annotation_position=, row=)."""
    fig.add_hline(y=y, line=dict(dash="dash", color=colour, width=1), annotation_text=text, **more)


def _reference_lines(fig, references: Mapping[str, float] | None, colour: str = "#555", **where: Any) -> None:
    """A dashed, labelled horizontal line at each reference level (unigram, bigram, ...); where: row=, col=."""
    for name, value in (references or {}).items():
        reference_line(fig, float(value), f"{name} {float(value):.3f}", colour, annotation_position="top left", **where)


def _array(x: Any) -> np.ndarray:
    """A float numpy array from a tensor, array or nested sequence."""
    if hasattr(x, "detach"):  # a torch.Tensor (duck-typed)
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def visible(token: str) -> str:
    """A token as it reads on an axis: spaces and control characters made visible."""
    return token.replace(" ", "\u2423").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") or "''"


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Unique axis labels "pos:token": categorical axes would merge repeated tokens."""
    return [f"{i}:{visible(t)}" for i, t in enumerate(tokens)]


def _is_cache(x: Any) -> bool:
    return not hasattr(x, "shape") and not isinstance(x, (list, tuple)) and hasattr(x, "__getitem__")


# --------------------------------------------------------------------------- attention


def attention_patterns(
    pattern: Float[Any, "head q k"] | Float[Any, "batch head q k"] | Any,
    tokens: Sequence[str],
    layer: int | None = None,
    *,
    batch: int = 0,
    heads: Sequence[int] | None = None,
    cols: int = 4,
    title: str | None = None,
) -> go.Figure:
    """One heatmap per head of a layer: query rows, key columns, both labelled with the tokens.

    `pattern` is [head, q, k] (or [batch, head, q, k], `batch` picked), or a
    cache (ActivationCache / dict) read at blocks.{layer}.attn.hook_pattern.
    """
    if _is_cache(pattern):
        if layer is None:
            raise PlotInputError("attention_patterns needs layer= when given a cache")
        pattern = pattern[f"blocks.{layer}.attn.hook_pattern"]
    p = _array(pattern)
    if p.ndim == 4:  # batch -1 would show the last sequence under the labels of another without a word
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or not 0 <= batch < p.shape[0]:
            raise PlotInputError(f"batch: the pattern has sequences 0..{p.shape[0] - 1}, not {batch!r:.40}")
        p = p[batch]
    n = len(tokens)
    if p.ndim != 3 or p.shape[1:] != (n, n):
        raise PlotInputError(f"attention pattern must be [head, q, k] with q = k = {n} tokens, got shape {p.shape}")
    heads = list(range(p.shape[0])) if heads is None else list(heads)
    bad = [h for h in heads if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < p.shape[0]]
    if bad or not heads:
        raise PlotInputError(f"heads: the pattern has heads 0..{p.shape[0] - 1}; got {bad or heads}")
    cols = max(1, min(cols, len(heads)))
    rows = math.ceil(len(heads) / cols)
    labels = token_labels(tokens)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"head {h}" for h in heads],
        horizontal_spacing=0.12 / cols,
        vertical_spacing=0.3 / max(rows, 2),
    )
    for i, h in enumerate(heads):
        fig.add_trace(
            go.Heatmap(
                z=p[h],
                x=labels,
                y=labels,
                coloraxis="coloraxis",
                name=f"head {h}",
                hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.4f}}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    side = max(220, min(420, 18 * n + 80))
    layer_text = f"layer {layer} " if layer is not None else ""
    fig.update_layout(
        title=title or f"Attention patterns, {layer_text}(query rows, key columns)",
        coloraxis=dict(colorscale="Blues", cmin=0.0, cmax=1.0, colorbar=dict(title="weight")),
        height=rows * side + 120,  # width follows the page
    )
    # Categories in token order, query 0 at the top as in the pattern matrix.
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels, tickangle=-60)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels, autorange="reversed")
    return fig


# --------------------------------------------------------------------------- probes


def alpha_tt_heatmap(
    alpha: Float[Any, "layer head"] | Mapping[str, Float[Any, "layer head"]],
    *,
    baseline: float | None = None,
    title: str = "Self-attention weight alpha_tt",
) -> go.Figure:
    """Layer x head heatmap of alpha_tt (mean self-weight); a dict of runs plots side by side.

    baseline: the value uniform causal attention would give (e.g. mean of
    1/(t+1)), shown in the title and on hover.
    """
    runs = dict(alpha) if isinstance(alpha, Mapping) else {"": alpha}
    arrays = {name: _array(a) for name, a in runs.items()}
    for name, a in arrays.items():
        if a.ndim != 2:
            raise PlotInputError(f"alpha_tt {name!r} must be [layer, head], got shape {a.shape}")
    # At most three runs a row, long names broken at "/": side-by-side titles never overlap.
    cols = min(3, len(arrays))
    rows = math.ceil(len(arrays) / cols)
    titles = [name.replace("/", "<br>") for name in runs] if len(runs) > 1 else None
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.12, vertical_spacing=min(0.3, 0.6 / rows)
    )
    extra = f"<br>uniform baseline {baseline:.3f}" if baseline is not None else ""
    for i, (name, a) in enumerate(arrays.items()):
        fig.add_trace(
            go.Heatmap(
                z=a,
                x=[f"head {h}" for h in range(a.shape[1])],
                y=[f"layer {layer}" for layer in range(a.shape[0])],
                coloraxis="coloraxis",
                name=name,
                texttemplate="%{z:.2f}",
                hovertemplate=f"{name}<br>%{{y}}, %{{x}}<br>alpha_tt %{{z:.4f}}{extra}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    if baseline is not None:
        title = f"{title} (uniform baseline {baseline:.3f})"
    fig.update_layout(
        title=title,
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=1.0, colorbar=dict(title="alpha_tt")),
        height=rows * max(300, 60 * max(a.shape[0] for a in arrays.values()) + 160),
    )
    fig.update_yaxes(autorange="reversed")
    return fig


def heatmap(z: Any, x: Any, y: Any, *, title: str, height: int, top_first: bool = True, **trace: Any) -> go.Figure:
    """One heatmap of z over x (columns) and y (rows), `trace` its other options; top_first: row 0 on top."""
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, **trace))
    fig.update_layout(title=title, height=height)
    if top_first:
        fig.update_yaxes(autorange="reversed")
    return fig


def _log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks for log10 data: every decade, plus 2 and 5 when the range is narrow."""
    decades = range(math.floor(lo), math.ceil(hi) + 1)
    mantissas = (1, 2, 5) if len(decades) <= 3 else (1,)
    ticks = [math.log10(m) + d for d in decades for m in mantissas]
    ticks = [t for t in ticks if lo - 1e-9 <= t <= hi + 1e-9] or [lo]
    return ticks, [f"{10**t:.3g}" for t in ticks]


def gradient_flow_heatmap(
    grad_norms: Float[Any, "layer step"],
    steps: Sequence[int | float] | None = None,
    *,
    layer_labels: Sequence[str] | None = None,
    title: str = "Gradient norm per layer",
) -> go.Figure:
    """Layer x step heatmap on a log colour scale.

    Plotly has no log colour scale: the heatmap holds log10 values and the
    colour bar's tick labels show the real ones; hover shows the real value.
    Zeros (no gradient) show as gaps.
    """
    g = _array(grad_norms)
    if g.ndim != 2:
        raise PlotInputError(f"grad_norms must be [layer, step], got shape {g.shape}")
    if (g < 0).any():
        raise PlotInputError("grad_norms must be non-negative (norms)")
    x = list(steps) if steps is not None else list(range(g.shape[1]))
    y = list(layer_labels) if layer_labels is not None else [f"layer {layer}" for layer in range(g.shape[0])]
    if len(x) != g.shape[1] or len(y) != g.shape[0]:
        raise PlotInputError(f"{len(y)} layer labels and {len(x)} steps for grad_norms of shape {g.shape}")
    with np.errstate(divide="ignore"):
        z = np.where(g > 0, np.log10(np.where(g > 0, g, 1.0)), np.nan)
    finite = z[np.isfinite(z)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    tickvals, ticktext = _log_ticks(lo, hi)
    fig = heatmap(
        z,
        x,
        y,
        title=title,
        height=max(300, 40 * g.shape[0] + 160),
        customdata=g,
        colorscale="Viridis",
        zmin=lo,
        zmax=hi if hi > lo else lo + 1,
        colorbar=dict(title="grad norm", tickvals=tickvals, ticktext=ticktext),
        hovertemplate="%{y}<br>step %{x}<br>grad norm %{customdata:.3e}<extra></extra>",
    )
    fig.update_layout(xaxis_title="step")
    return fig


def norm_profile(
    profiles: Mapping[str, Sequence[float]],
    x_labels: Sequence[str] | None = None,
    *,
    title: str = "Hidden-state norm along the residual stream",
    y_title: str = "mean norm",
    log_y: bool = False,
) -> go.Figure:
    """One line per configuration: a norm at each point along the layers (x_labels name the points)."""
    fig = go.Figure()
    for i, (name, values) in enumerate(profiles.items()):
        v = _array(values)
        if v.ndim != 1:
            raise PlotInputError(f"norm profile {name!r} must be a list of numbers, got shape {v.shape}")
        if x_labels is not None and len(v) > len(x_labels):
            raise PlotInputError(f"norm profile {name!r} has {len(v)} values but only {len(x_labels)} x labels")
        x = list(x_labels[: len(v)]) if x_labels is not None else list(range(len(v)))
        fig.add_trace(go.Scatter(x=x, y=v, mode="lines+markers", name=name, line=dict(color=PALETTE[i % 10])))
    fig.update_layout(title=title, yaxis_title=y_title, yaxis_type="log" if log_y else None, hovermode="x unified")
    if x_labels is not None:
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(x_labels))
    return fig


def loss_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    references: Mapping[str, float] | None = None,
    *,
    title: str = "Loss",
    y_title: str = "loss (nats)",
    log_x: bool = False,
    group_sep: str = "/",
) -> go.Figure:
    """One line per configuration and seed; labels "config/seed0" share a colour per config.

    references (name -> value, e.g. unigram / bigram entropy) are dashed horizontal lines.
    """
    fig = go.Figure()
    colours: dict[str, str] = {}
    for label, (steps, losses) in curves.items():
        s, v = _array(steps), _array(losses)
        if s.shape != v.shape or s.ndim != 1:
            raise PlotInputError(f"curve {label!r}: steps {s.shape} and losses {v.shape} must be equal-length lists")
        group = label.split(group_sep)[0]
        colour = colours.setdefault(group, PALETTE[len(colours) % len(PALETTE)])
        fig.add_trace(
            go.Scatter(x=s, y=v, mode="lines", name=label, legendgroup=group, line=dict(color=colour, width=1.5))
        )
    _reference_lines(fig, references)
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=y_title, xaxis_type="log" if log_x else None)
    return fig


# --------------------------------------------------------------------------- where the token is


def identity_accuracy(
    runs: Mapping[str, Mapping[str, Any]],
    offsets: Sequence[int] = (0, -1),
    *,
    title: str = "Where is the current token? Linear-probe accuracy by site",
) -> go.Figure:
    """One panel per offset: probe accuracy at each site, one line per variant (probes.identity.measure_identity
    records).

    Dashed lines: chance (unigram) and, for offsets before the current token, the
    current-token level (what the current token alone predicts about that token).
    """
    if not runs:
        raise PlotInputError("identity_accuracy needs at least one run")
    fig = make_subplots(rows=1, cols=len(offsets), subplot_titles=[f"offset {k}" for k in offsets], shared_yaxes=True)
    for i, (name, rec) in enumerate(runs.items()):
        missing = {"labels", "offsets", "accuracy", "levels"} - set(rec)
        if missing:
            raise PlotInputError(f"run {name!r} is not an identity-probe record (missing {sorted(missing)})")
        acc = _array(rec["accuracy"])
        if acc.ndim != 2 or acc.shape != (len(rec["labels"]), len(rec["offsets"])):
            raise PlotInputError(f"run {name!r}: accuracy must be [site][offset], got shape {acc.shape}")
        for col, k in enumerate(offsets, start=1):
            if k not in rec["offsets"]:
                raise PlotInputError(f"run {name!r} has no offset {k} (has {rec['offsets']})")
            j = rec["offsets"].index(k)
            fig.add_trace(
                go.Scatter(
                    x=list(rec["labels"]),
                    y=acc[:, j],
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    line=dict(color=PALETTE[i % len(PALETTE)]),
                    hovertemplate=f"{name}<br>%{{x}}, offset {k}<br>accuracy %{{y:.3f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    first = next(iter(runs.values()))
    for col, k in enumerate(offsets, start=1):
        j = first["offsets"].index(k)
        levels = [("chance (unigram)", first["levels"]["unigram"]["accuracy"][j], "#999")]
        if k != 0:
            levels.append(("current token alone", first["levels"]["current_token"]["accuracy"][j], "#555"))
        for label, value, colour in levels:
            _reference_lines(fig, {label: value}, colour, row=1, col=col)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(first["labels"]), row=1, col=col)
    fig.update_yaxes(title_text="accuracy", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title=title, hovermode="closest", height=420)
    return fig


def logit_lens_figure(
    runs: Mapping[str, Mapping[str, Any]],
    references: Mapping[str, float] | None = None,
    *,
    title: str = "Logit lens: cross-entropy of the residual read through ln_final and the unembedding",
) -> go.Figure:
    """Cross-entropy by layer, one line per variant (interp.reading.decompose.logit_lens_over records).

    references (e.g. {"unigram": 3.35, "bigram": 2.48}) are dashed horizontal lines.
    """
    fig = go.Figure()
    order: list[str] = []
    if isinstance(runs, Mapping) and {"ce", "layers"} <= set(runs):  # one record where a mapping of them is meant
        raise PlotInputError(
            "runs: a mapping of run name -> logit-lens record, got one record; name it: logit_lens_figure({'my run': "
            "record})"
        )
    for i, (name, rec) in enumerate(runs.items()):
        if "ce" not in rec or "layers" not in rec:
            raise PlotInputError(f"run {name!r} is not a logit-lens record (needs 'layers' and 'ce')")
        ce = _array(rec["ce"])
        if ce.ndim != 1 or len(ce) != len(rec["layers"]):
            raise PlotInputError(f"run {name!r}: {len(rec['layers'])} layers but ce of shape {ce.shape}")
        order += [x for x in rec["layers"] if x not in order]
        fig.add_trace(
            go.Scatter(
                x=list(rec["layers"]),
                y=ce,
                mode="lines+markers",
                name=name,
                line=dict(color=PALETTE[i % len(PALETTE)]),
                hovertemplate=f"{name}<br>after %{{x}}<br>CE %{{y:.3f}}<extra></extra>",
            )
        )
    _reference_lines(fig, references)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=order, title_text="residual after block")
    fig.update_layout(title=title, yaxis_title="cross-entropy (nats)", hovermode="x unified")
    return fig
