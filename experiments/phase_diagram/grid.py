"""The phase diagram's grid: axes, cells, slices, neighbours, and what the grid costs in FLOPs.

A cell is one (residual, n_layers, lr, d_model, self_bias) point; every other field comes from the base
shape (the preset with --set). A slice is one residual varied over one or more axes around a base cell
(their product); the grid is the union of its slices' cells plus the reference cells (full and attn_only
at each depth and width the grid has, at the base lr). Plain Python: no torch.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

from experiments.runner.text import num
from interp.config.model_config import RESIDUALS
from interp.errors import ToolkitError

AXES = ("residual", "n_layers", "lr", "d_model", "self_bias")
NUMERIC = AXES[1:]
LABELS = {"residual": "residual", "n_layers": "depth", "lr": "lr", "d_model": "width", "self_bias": "self_bias"}
SUBJECT = "ffn_only"  # the residual the default grid and a bare --axes vary
REFERENCES = ("full", "attn_only")
# The default grid: ffn_only over depth x lr and depth x self_bias, and width at depth 4 (the routing test's
# cpu-quick shape is 4 layers at width 128), with full and attn_only at each depth and width as references.
DEFAULT_DEPTHS = (1, 2, 3, 4, 6)
DEFAULT_LRS = (5e-4, 1e-3, 2e-3, 4e-3)
DEFAULT_SELF_BIASES = (0.0, 1.0, 2.0, 4.0)
DEFAULT_WIDTHS = (64, 128)
WIDTH_DEPTH = 4
CONFIRM_FACTOR = 3  # a boundary cell is rerun this many times longer ...
CONFIRM_SEEDS = 3  # ... with this many seeds


@dataclass(frozen=True)
class Cell:
    residual: str
    n_layers: int
    lr: float
    d_model: int
    self_bias: float

    @property
    def name(self) -> str:
        """The variant name, and so the run directory (slugged): e.g. 'ffn_only L4 d64 lr0.002 sb0'."""
        return f"{self.residual} L{self.n_layers} d{self.d_model} lr{num(self.lr)} sb{num(self.self_bias)}"

    def coords(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> Cell:
        return dataclasses.replace(self, **changes)

    def overrides(self, min_lr_ratio: float) -> dict[str, Any]:
        """The cell's --set fields; min_lr follows lr (the base's min_lr / lr): the schedule keeps its shape."""
        return {
            "residual": self.residual,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "self_bias": self.self_bias,
            "lr": self.lr,
            "min_lr": self.lr * min_lr_ratio,
        }


def base_cell(spec) -> Cell:
    """The cell the base shape (preset + --set) is, with the experiment's subject as its residual."""
    m = spec.model
    cell = Cell(SUBJECT, m.n_layers, spec.train.lr, m.d_model, float(m.self_bias))
    for axis in ("lr", "self_bias"):  # what --axes refuses is refused from --set or a preset too
        if not math.isfinite(getattr(cell, axis)):
            raise ToolkitError(
                f"the phase diagram's cells need a finite {axis}; the base shape has "
                f"{axis}={getattr(cell, axis)} (from --set or the preset): its cells could "
                "be neither named nor written to results.json"
            )
    return cell


@dataclass(frozen=True)
class Slice:
    """One residual varied over `axes` ((axis, values) pairs; their product) around `base`."""

    base: Cell
    axes: tuple[tuple[str, tuple], ...]

    def cells(self) -> list[Cell]:
        names = [a for a, _ in self.axes]
        return [
            self.base.replace(**dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*(v for _, v in self.axes))
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.coords(), "axes": {a: list(v) for a, v in self.axes}}


# ----- --axes and --references ---------------------------------------------------------------------------


def _parse_value(axis: str, text: str) -> Any:
    if axis == "residual":
        if text not in RESIDUALS:
            raise ToolkitError(f"--axes residual: {text!r} is not a residual; choose from {', '.join(RESIDUALS)}")
        return text
    try:
        value = int(text) if axis in ("n_layers", "d_model") else float(text)
    except ValueError:
        kind = "an integer" if axis in ("n_layers", "d_model") else "a number"
        raise ToolkitError(f"--axes {axis}: {text!r} is not {kind}") from None
    if not math.isfinite(value) or (axis != "self_bias" and value <= 0):
        need = "finite" if axis == "self_bias" else "finite and > 0"
        raise ToolkitError(f"--axes {axis}: {text!r} must be {need}")
    return value


def parse_axes(items: list[str]) -> dict[str, tuple]:
    """--axes NAME=V1,V2,... (repeatable) -> {axis: values}; numeric values sorted ascending.

    Refused with one line: no '=', an unknown axis, an axis given twice, an empty entry, a value of the
    wrong kind, a value given twice (1e-3 and 0.001 are the same value).
    """
    axes: dict[str, tuple] = {}
    for item in items:
        if "=" not in item:
            raise ToolkitError(f"--axes expects NAME=V1,V2,..., got {item!r}")
        name, text = (s.strip() for s in item.split("=", 1))
        if name not in AXES:
            raise ToolkitError(f"unknown axis {name!r}; axes: {', '.join(AXES)}")
        if name in axes:
            raise ToolkitError(f"--axes {name} is given twice; give all its values once: --axes {name}=V1,V2")
        parts = [p.strip() for p in text.split(",")]
        if "" in parts:
            raise ToolkitError(f"--axes {name}={text!r} has an empty entry")
        values = [_parse_value(name, p) for p in parts]
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ToolkitError(f"--axes {name} repeats {', '.join(repeated)}; give each value once")
        axes[name] = tuple(values) if name == "residual" else tuple(sorted(values))
    return axes


def parse_references(text: str) -> tuple[str, ...]:
    """--references: comma-separated residuals trained at each depth and width of the grid ('' for none)."""
    if not text.strip():
        return ()
    names = [s.strip() for s in text.split(",")]
    bad = [n for n in names if n not in RESIDUALS]
    if bad or "" in names:
        raise ToolkitError(f"--references {text!r}: choose residuals from {', '.join(RESIDUALS)}, comma-separated")
    if len(set(names)) != len(names):
        raise ToolkitError(f"--references {text!r} names a residual twice")
    return tuple(names)


# ----- the grid -----------------------------------------------------------------------------------------


def default_slices(base: Cell) -> list[Slice]:
    """ffn_only over depth x lr and depth x self_bias (at the base width), and over width at depth 4."""
    subject = base.replace(residual=SUBJECT)
    widths = tuple(sorted({base.d_model, *DEFAULT_WIDTHS}))
    return [
        Slice(subject, (("n_layers", DEFAULT_DEPTHS), ("lr", DEFAULT_LRS))),
        Slice(subject, (("n_layers", DEFAULT_DEPTHS), ("self_bias", DEFAULT_SELF_BIASES))),
        Slice(subject.replace(n_layers=WIDTH_DEPTH), (("d_model", widths),)),
    ]


def slices_of(axes: dict[str, tuple], base: Cell) -> list[Slice]:
    """One slice, the product of --axes around the base cell (residual: ffn_only unless it is an axis).

    The axes keep the order given: the first numeric one is a heatmap's x axis, the second its y axis."""
    return [Slice(base.replace(residual=SUBJECT), tuple(axes.items()))]


def grid_cells(slices: list[Slice]) -> list[Cell]:
    """The slices' cells, each once, in order."""
    return list(dict.fromkeys(c for s in slices for c in s.cells()))


def reference_cells(cells: list[Cell], base: Cell, references: tuple[str, ...]) -> list[Cell]:
    """Each reference residual at every (depth, width) the grid has, at the base lr and self_bias 0 (not grid cells)."""
    shapes = dict.fromkeys((c.n_layers, c.d_model) for c in cells)
    grid = set(cells)
    out = [Cell(r, n, base.lr, d, 0.0) for (n, d) in shapes for r in references]
    return [c for c in dict.fromkeys(out) if c not in grid]


def full_reference(cell: Cell, by_coords: dict[Cell, Any]) -> Cell | None:
    """The full cell at this cell's depth and width (base lr: the reference cells' lr), if it was run."""
    candidates = [
        c for c in by_coords if c.residual == "full" and (c.n_layers, c.d_model) == (cell.n_layers, cell.d_model)
    ]
    if cell.residual == "full":
        return None
    exact = [c for c in candidates if (c.lr, c.self_bias) == (cell.lr, 0.0)]
    return (exact or candidates or [None])[0]


def neighbours(cells: list[Cell]) -> list[tuple[Cell, Cell, str]]:
    """Pairs of cells next to each other along one numeric axis (same residual and every other coordinate)."""
    pairs = []
    for axis in NUMERIC:
        lines: dict[tuple, list[Cell]] = {}
        for c in cells:
            key = tuple((k, v) for k, v in c.coords().items() if k != axis)
            lines.setdefault(key, []).append(c)
        for line in lines.values():
            line = sorted(line, key=lambda c: getattr(c, axis))
            pairs += [(a, b, axis) for a, b in itertools.pairwise(line)]
    return pairs


def confirm_seeds(first: int) -> list[int]:
    return [first + i for i in range(CONFIRM_SEEDS)]
