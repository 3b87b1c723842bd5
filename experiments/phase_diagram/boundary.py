"""Where each cell sits, and the boundary in words: the phase diagram's places and sentences.

A cell's place is the routing test's rule (experiments.routing_test.rules.place: floor, between, bigram, near
full, uses context) applied to each of its runs, never to an average: runs that disagree make the cell
"seed-split". A run whose loss, projected to 3x its steps at the pace of its second half
(experiments.statistics.stats.tail), would sit in another place makes the cell provisional, heading there.

A view is a slice seen as a table: x (its first numeric axis), y (its second, or none), the rest fixed.
One sentence per view says where the subject collapses (sits at the unigram floor), e.g.

    ffn_only collapses at depth >= 3 for lr <= 0.001; at every depth at lr 0.002 (width 64, self_bias 0; unconfirmed)

derived from the cells' places: from the confirmed places (3 seeds at 3x the steps) where confirmation ran.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from experiments.phase_diagram.grid import CONFIRM_FACTOR, CONFIRM_SEEDS, LABELS, NUMERIC, Cell, Slice, neighbours
from experiments.runner.text import num
from experiments.shared.places import place

FLOOR = "at the unigram floor"
SPLIT = "seed-split"
SHORT = {
    "at the unigram floor": "floor",
    "at the bigram level": "bigram",
    "between bigram and floor": "between",
    "near full": "near full",
    "below bigram (uses context)": "context",
    SPLIT: "split",
}


def cell_place(
    losses: list[float], projected: list[float], levels: dict[str, float], full: float | None, margin: float
) -> dict[str, Any]:
    """The place of a cell from its runs' final losses (and their 3x projections), seed by seed."""
    places = [place(x, levels, full, margin) for x in losses]
    later = [place(x, levels, full, margin) for x in projected]
    where = places[0] if len(set(places)) == 1 else SPLIT
    moving = [i for i, (a, b) in enumerate(zip(places, later, strict=True)) if a != b]
    heading = (later[0] if len(set(later)) == 1 else SPLIT) if moving else None
    return {"place": where, "seed_places": places, "provisional": bool(moving), "heading": heading}


def collapse_side(p: dict[str, Any]) -> bool | str:
    """Which side of the collapse boundary a place is on: True (floor), False (off it), or SPLIT (seeds
    on the floor and off it). Seeds that split among places off the floor (between and context) are off
    it: where the collapse holds does not depend on them. Without seed places, a split counts as SPLIT."""
    if p["place"] != SPLIT:
        return p["place"] == FLOOR
    return SPLIT if FLOOR in p.get("seed_places", [FLOOR]) else False


def boundary_cells(places: dict[Cell, dict[str, Any]], cells: list[Cell]) -> list[Cell]:
    """The cells at the collapse boundary, the one the sentences state: a neighbour pair along some axis
    with one cell on the floor and the other off it (or seed-split), and a cell whose 3x projection
    crosses the floor (provisional, heading onto or off it). Changes among the places off the floor
    (between, bigram, context) say nothing about where the collapse holds. Cells without a place are
    left out (their neighbours either side become neighbours)."""
    side = {c: collapse_side(places[c]) for c in cells if c in places}
    out = set()
    for a, b, _ in neighbours(list(side)):
        if side[a] != side[b]:
            out.update((a, b))
    for c in side:
        p = places[c]
        if p["provisional"] and collapse_side({"place": p["heading"]}) != side[c]:
            out.add(c)
    return [c for c in cells if c in out]


def claim_cells(places: dict[Cell, dict[str, Any]], cells: list[Cell]) -> list[Cell]:
    """The cells a collapse sentence rests on: every cell on the floor (each one is claimed to collapse)
    and the boundary cells beside them. The edge alone is not enough: depth 6 at lr 2e-3 sat on the floor
    with depth 4 on the floor below it, and at 3x the steps one of its three seeds left the floor."""
    claimed = {c for c in cells if c in places and collapse_side(places[c]) is True}
    claimed.update(boundary_cells(places, cells))
    return [c for c in cells if c in claimed]


def mark(p: dict[str, Any] | None) -> str:
    """A place in a few characters: 'floor', 'floor?' (provisional), 'split'; '' for no place."""
    if not p:
        return ""
    return SHORT.get(p["place"], p["place"]) + ("?" if p["provisional"] else "")


# ----- views --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """A slice's cells as a table: x along the first numeric axis, y along the second (or none)."""

    residual: str
    x: str | None
    xs: tuple
    y: str | None
    ys: tuple
    fixed: tuple[tuple[str, Any], ...]  # every other coordinate

    def cell(self, xv: Any = None, yv: Any = None) -> Cell:
        coords = {**dict(self.fixed), "residual": self.residual}
        coords.update((axis, v) for axis, v in ((self.x, xv), (self.y, yv)) if axis)
        return Cell(**coords)

    def fixed_text(self) -> str:
        return ", ".join(f"{LABELS[a]} {fmt(v)}" for a, v in self.fixed)

    def title(self) -> str:
        axes = " x ".join(LABELS[a] for a in (self.y, self.x) if a)
        return f"{self.residual}: {axes or 'one cell'} ({self.fixed_text()})"


def views(s: Slice) -> list[View]:
    """The slice's views: one per combination of its axes beyond the first two numeric ones (and residual)."""
    varied = dict(s.axes)
    numeric = [a for a in varied if a in NUMERIC]
    x, y = (numeric + [None, None])[:2]
    rest = [a for a in varied if a not in (x, y) and a != "residual"]
    out = []
    for residual in varied.get("residual", (s.base.residual,)):
        for combo in itertools.product(*(varied[a] for a in rest)):
            coords = {**s.base.coords(), **dict(zip(rest, combo, strict=True))}
            fixed = tuple((a, coords[a]) for a in NUMERIC if a not in (x, y))
            out.append(View(residual, x, varied[x] if x else (None,), y, varied[y] if y else (None,), fixed))
    return out


# ----- sentences ----------------------------------------------------------------------------------------


def fmt(v: Any) -> str:
    return num(v) if isinstance(v, float) else str(v)


def collapsed_text(axis: str, known: list, collapsed: set, split: int | list = 0) -> str:
    """Where along one axis the cells collapse, among the values with a place: 'at depth >= 3', ...
    split: the seed-split values (or how many), so "no" / "every" is said only of the others, and a
    range with a split value inside it says so ('at depth >= 4 except depth 6 (seed-split)')."""
    label = LABELS[axis]
    splits = sorted(split) if isinstance(split, list) else []
    if not known:
        why = "every cell tried is seed-split" if split else "no cell has a place"
        return f"nowhere known along {label} ({why})"
    other = " other" if split else ""
    if not collapsed:
        return f"at no{other} {label} tried"

    def but(inside: list) -> str:
        return f" except {label} {', '.join(fmt(v) for v in inside)} (seed-split)" if inside else ""

    if collapsed == set(known):
        return f"at every {label} tried" + but(splits) if splits else f"at every{other} {label} tried"
    ks = sorted(known)
    lo, hi = min(collapsed), max(collapsed)
    if all(v in collapsed for v in ks if v >= lo):
        return f"at {label} >= {fmt(lo)}" + but([v for v in splits if v >= lo])
    if all(v in collapsed for v in ks if v <= hi):
        return f"at {label} <= {fmt(hi)}" + but([v for v in splits if v <= hi])
    return f"at {label} {', '.join(fmt(v) for v in sorted(collapsed))} only"


def range_text(axis: str, group: list, values: list) -> str:
    """A run of consecutive values of one axis: 'for lr <= 0.001', 'at lr 0.002', 'for 1 <= self_bias <= 2'."""
    label = LABELS[axis]
    lo, hi = group[0], group[-1]
    if len(group) == len(values):
        return f"at every {label} tried"
    if lo == hi:
        return f"at {label} {fmt(lo)}"
    if lo == values[0]:
        return f"for {label} <= {fmt(hi)}"
    if hi == values[-1]:
        return f"for {label} >= {fmt(lo)}"
    return f"for {fmt(lo)} <= {label} <= {fmt(hi)}"


def sentence(view: View, places: dict[Cell, dict[str, Any]], confirmed: dict[Cell, bool] | None) -> str:
    """The boundary of one view in one sentence, from the places given (a cell's final place: confirmed or not).

    confirmed: None when no confirmation ran; else cell -> whether this boundary cell was confirmed
    (cells that are not boundary cells are absent).
    """

    def row(yv) -> tuple[list, set, list]:
        known, collapsed, split = [], set(), []
        for xv in view.xs:
            p = places.get(view.cell(xv, yv))
            side = collapse_side(p) if p else None
            if side == SPLIT:  # seeds on the floor and off it: no place along the axis
                split.append(xv)
            elif p:
                known.append(xv)
                if side:
                    collapsed.add(xv)
        return known, collapsed, split

    if view.x is None:
        p = places.get(view.cell())
        body = f"{view.residual} sits {p['place'] if p else 'nowhere (not run)'}"
    else:
        parts = [(yv, collapsed_text(view.x, *row(yv))) for yv in view.ys]
        if view.y is None:
            body = f"{view.residual} collapses {parts[0][1]}"
        else:
            groups = [list(g) for _, g in itertools.groupby(parts, key=lambda p: p[1])]
            texts = [f"{g[0][1]} {range_text(view.y, [yv for yv, _ in g], list(view.ys))}" for g in groups]
            body = f"{view.residual} collapses " + "; ".join(texts)
    notes = [view.fixed_text()] if view.fixed else []
    cells = [view.cell(xv, yv) for yv in view.ys for xv in view.xs]
    split = [c for c in cells if places.get(c, {}).get("place") == SPLIT]
    provisional = [c for c in cells if places.get(c, {}).get("provisional")]
    if split:
        notes.append("seed-split at " + ", ".join(where(view, c) for c in split))
    if provisional:
        notes.append(
            "provisional at "
            + ", ".join(f"{where(view, c)} (heading to {SHORT.get(places[c]['heading'])})" for c in provisional)
        )
    notes.append(confirmation_text(cells, confirmed))
    return f"{body} ({'; '.join(notes)})"


def where(view: View, c: Cell) -> str:
    return " ".join(f"{LABELS[a]} {fmt(getattr(c, a))}" for a in (view.x, view.y) if a) or c.name


def confirmation_text(cells: list[Cell], confirmed: dict[Cell, bool] | None) -> str:
    if confirmed is None:
        return "unconfirmed"
    boundary = [c for c in cells if c in confirmed]
    done = sum(confirmed[c] for c in boundary)
    if not boundary:
        return "no floor or boundary cell to confirm"
    if done == len(boundary):
        plural = "s" * (done > 1)
        return (
            f"its {done} floor and boundary cell{plural} confirmed with {CONFIRM_SEEDS} seeds at "
            f"{CONFIRM_FACTOR}x the steps"
        )
    return f"{done} of {len(boundary)} floor and boundary cells confirmed, the rest unconfirmed"
