"""Small self-contained SVG line charts for the static figures beside the interactive reports.

Hand-written because the libraries that draw static SVG pull in a browser (plotly's kaleido) or a plotting stack
the project does not otherwise install (matplotlib); these figures need axes, polylines and a legend only."""

from __future__ import annotations

from xml.sax.saxutils import escape

PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


def frame(width: int, height: int, left: float, top: float, w: float, h: float) -> list[str]:
    """The opening tag, a white page and the two axis lines of a plot area w x h at (left, top)."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="black"/>',
    ]


def axis_titles(height: int, left: float, top: float, w: float, h: float, x_title: str, y_title: str) -> list[str]:
    return [
        f'<text x="{left + w / 2}" y="{height - 6}" text-anchor="middle">{escape(x_title)}</text>',
        f'<text x="12" y="{top + h / 2}" transform="rotate(-90 12 {top + h / 2})" text-anchor="middle">'
        f"{escape(y_title)}</text>",
    ]


def legend_entry(x: float, y: float, colour: str, label: str, dash: str = "") -> str:
    """A legend line at (x, y - 4) and its (escaped) label; dash is an SVG attribute string or ''."""
    return (
        f'<line x1="{x}" y1="{y - 4}" x2="{x + 20}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dash}/>'
        f'<text x="{x + 24}" y="{y}">{escape(label)}</text>'
    )


def line_chart(
    width: int,
    height: int,
    box: tuple[float, float, float, float],
    ticks: list[str],
    titles: tuple[str, str],
    lines: list[tuple[list[str], str, str]],
) -> str:
    """A whole chart: the frame of the plot area box (left, top, w, h), the caller's tick labels, the axis titles
    (x, y), and each line (its "x,y" points, legend label, dash attribute or '') in PALETTE's colours, its legend
    entry to the right of the plot."""
    left, top, w, h = box
    out = [*frame(width, height, left, top, w, h), *ticks, *axis_titles(height, left, top, w, h, *titles)]
    for i, (points, label, dash) in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{" ".join(points)}"/>')
        out.append(legend_entry(left + w + 10, top + 14 * i + 10, colour, label, dash))
    return close(out)


def close(out: list[str]) -> str:
    return "\n".join([*out, "</svg>"]) + "\n"
