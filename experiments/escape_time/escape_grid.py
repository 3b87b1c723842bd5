"""The grid an escape-time command line asks for: its options, their checks before anything loads, and the
cells (ffn_only over depth x lr, the held-out depth, the references)."""

from __future__ import annotations

from typing import Any

from experiments.runner.frame import Context, Variant, check_number
from experiments.shared.options import comma_list
from interp.command.cli import default_option
from interp.errors import ToolkitError

DEFAULT_MARGIN = 0.05  # the routing test's
# preset -> (depths, lrs as multiples of the preset's lr, held-out depth, seeds a cell, reference residuals,
# reference seeds, escape probe every this many evaluations)
PRESET_GRID = {"smoke": ((1, 2), (2.0,), 3, 4, "full", 2, 1)}
DEFAULT_GRID = ((2, 3, 4, 6), (0.5, 1.0), 5, 16, "full,attn_only", 4, 4)  # phase-cell: lr 1e-3 and 2e-3
# max_steps as a multiple of the preset's. The smoke grid trains 6x at twice its lr so that depth 2 escapes
# (at 2x and the preset's lr it never did): the law, the held-out prediction and the mechanism then run on
# real escapes in a test, not only their "not fitted" lines.
PRESET_LENGTH = {"smoke": 6}
DEFAULT_LENGTH = 2  # about an hour's worth of the default grid would be 1x here, where depth 3 rarely escapes


def _ints(text: str, name: str) -> tuple[int, ...]:
    items = [v.strip() for v in text.split(",")]
    if not all(v.isascii() and v.isdigit() for v in items):  # int() would take '1_000' and full-width digits
        raise ToolkitError(f"{name} expects comma-separated integers, got {text!r}")
    values = tuple(int(v) for v in items)
    if any(v < 1 for v in values) or len(set(values)) != len(values):
        raise ToolkitError(f"{name} needs distinct integers >= 1, got {text!r}")
    return values


def add_arguments(p) -> None:
    g = p.add_argument_group("the grid")
    g.add_argument("--depths", help="ffn_only depths (default 2,3,4,6; smoke 1,2)")
    g.add_argument("--lrs", help="learning rates (default: the preset's lr x 0.5 and x 1; smoke x 2)")
    g.add_argument(
        "--holdout-depth",
        help="a depth left out of the law's fit, then trained to test it (default 5; smoke 3; '' for none)",
    )
    g.add_argument(
        "--references",
        help="residuals trained at every depth at the first lr, among full, attn_only and none (the residual "
        "with neither path) (default full,attn_only; smoke full; '' for no references)",
    )
    g.add_argument(
        "--reference-seeds", type=int, help="seeds per reference cell, the lowest of --seeds (default 4; smoke 2)"
    )
    default_option(g, "--margin", DEFAULT_MARGIN, "nats below unigram a loss must stay to have escaped")
    g.add_argument(
        "--probe-every",
        type=int,
        help="steps between escape probes (interventions, decodability); default 4 evaluation intervals",
    )
    g.add_argument(
        "--early-step", type=int, help="the evaluation step early features are read at (default the last one <= 100)"
    )


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False  # not a number: refused here as not 0 (the frame's own --set check would name it too)


def check(args) -> None:
    check_number("--margin", args.margin, 0.0, inclusive=False)
    if args.depths is not None:
        _ints(args.depths, "--depths")
    if args.lrs is not None:
        comma_list(args.lrs, "--lrs")
    if args.holdout_depth not in (None, "") and len(_ints(args.holdout_depth, "--holdout-depth")) != 1:
        raise ToolkitError(f"--holdout-depth takes one depth (or '' for none), got {args.holdout_depth!r}")
    if args.reference_seeds is not None and args.reference_seeds < 1:
        raise ToolkitError(f"--reference-seeds must be >= 1, got {args.reference_seeds}")
    for name in ("probe_every", "early_step"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ToolkitError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for item in args.set or []:  # a run's first N steps must not depend on how long it trains
        key, _, value = item.partition("=")
        if key.strip() == "eval_from" and not _is_zero(value):
            raise ToolkitError(
                f"--set {item}: escape times need evaluations from step 0 (eval_from=0): a run already below the "
                "floor at its first evaluation would read as escaping there"
            )
        if key.strip() == "lr_schedule" and value.strip() != "constant":
            raise ToolkitError(
                f"--set {item}: escape times need lr_schedule=constant (with a schedule a run's first steps depend "
                "on its length, and an escape time would be the schedule's)"
            )
    refs = [r.strip() for r in args.references.split(",")] if args.references and args.references.strip() else []
    bad = [r for r in refs if r not in ("full", "attn_only", "none")]  # ffn_only is the grid itself
    if bad or "" in refs or len(set(refs)) != len(refs):
        raise ToolkitError(f"--references {args.references!r}: give distinct residuals among full, attn_only, none")


class EscapeGrid:
    """The cells a command line asks for."""

    def __init__(self, ctx: Context):
        args, train = ctx.args, ctx.spec.train
        depths, mults, holdout, seeds, refs, ref_seeds, _ = PRESET_GRID.get(ctx.spec.preset, DEFAULT_GRID)
        self.depths = _ints(args.depths, "--depths") if args.depths else depths
        self.lrs = comma_list(args.lrs, "--lrs") if args.lrs else tuple(m * train.lr for m in mults)
        if args.holdout_depth is None:
            self.holdout = holdout
        else:
            self.holdout = _ints(args.holdout_depth, "--holdout-depth")[0] if args.holdout_depth else None
        if self.holdout in self.depths:
            raise ToolkitError(f"--holdout-depth {self.holdout} is one of --depths; it must be left out of the fit")
        self.n_seeds = seeds
        self.ref_seeds = args.reference_seeds or ref_seeds
        text = refs if args.references is None else args.references
        self.references = [r.strip() for r in text.split(",")] if text.strip() else []
        self.ratio = train.min_lr / train.lr

    def variant(self, residual: str, depth: int, lr: float) -> Variant:
        from experiments.runner.text import num

        overrides = {"residual": residual, "n_layers": depth, "lr": lr, "min_lr": lr * self.ratio}
        return Variant(f"{residual} L{depth} lr{num(lr)}", overrides)

    def grid(self) -> list[Variant]:
        return [self.variant("ffn_only", d, lr) for d in self.depths for lr in self.lrs]

    def held_out(self) -> list[Variant]:
        return [self.variant("ffn_only", self.holdout, lr) for lr in self.lrs] if self.holdout else []

    def reference(self) -> list[Variant]:
        return [self.variant(r, d, self.lrs[0]) for r in self.references for d in self.depths]

    def roles(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """variant name -> (role, its overrides)."""
        return {
            v.name: (role, v.overrides)
            for role, vs in (("grid", self.grid()), ("reference", self.reference()), ("holdout", self.held_out()))
            for v in vs
        }
