"""python -m experiments.phase_diagram: where ffn_only's collapse holds, over depth, lr, width and self-bias.

The paper calls ffn_only's collapse to the floor universal. Single runs cannot say where it holds; this
trains a grid of small models and maps it. Each cell is a (residual, n_layers, lr, d_model, self_bias)
point on a base shape (--preset, default phase-cell, plus --set); lr moves min_lr with it (same ratio).

    default grid   ffn_only over depth (1,2,3,4,6) x lr (5e-4, 1e-3, 2e-3, 4e-3), over depth x self_bias
                   (0, 1, 2, 4), and over width (64, 128) at depth 4 (the routing test's cpu-quick shape is 4
                   layers at width 128); full and attn_only at every depth and width (at the base lr) as
                   references: 48 cells
    --axes A=v,... one product grid instead (repeatable; axes residual, n_layers, lr, d_model, self_bias),
                   e.g. --axes n_layers=1,2,3,4,6 --axes lr=1e-3,2e-3; residual is ffn_only unless an axis
    --references   residuals trained at every depth and width of the grid (default full,attn_only; '' none)

Each cell's place among the reference levels is the routing test's rule (experiments.routing_test.rules.place:
floor if loss >= unigram - margin; bigram within the margin of it; between; near full; uses context),
applied to every run of the cell: runs that disagree make it "seed-split", never an average. A run whose
loss at 3x its steps, at the pace of its second half (experiments.statistics.stats.tail), would sit elsewhere makes
the cell provisional ("floor?" in the table). With --confirm, the cells a collapse sentence rests on
(experiments.phase_diagram.boundary.claim_cells: every cell on the floor, both cells of a neighbour pair along
an axis where one is on the floor and the other off it or seed-split, and any cell whose 3x projection
crosses the floor; changes among places off the floor move no sentence) are trained again with 3 seeds
at 3x the steps (separate run directories, variant "<cell> x3"), once the first pass has finished; where
a confirmed place moves the boundary, the cells beside its new position are confirmed in a further
round, until every cell the sentences rest on is confirmed. The boundary sentences read their
places where they ran and say "unconfirmed" otherwise. The console prints one sentence per slice, e.g.
"ffn_only collapses at depth >= 3 for lr <= 0.001; ...", derived from the places.

Early-training predictor (experiments.phase_diagram.collapse_predictor): per run, block-0 gradient norm at step 0 and at
the end of warm-up, layer-0 alpha_tt up to --early-step, current-token decodability at blocks.0.hook_resid_mid
(probes.identity, one site) at --early-step and at the end, hidden-norm growth; each early one tested as a
one-feature threshold classifier of "collapsed" on held-out runs (leave-one-out with an exact interval,
against the majority class; random half splits; AUC with a bootstrap interval). It may predict nothing:
then the report says so.

Runs are run directories as everywhere (<out>/<preset>/<cell>/seed<k>/): a finished cell is never
retrained, so adding axis values grows the grid; --launcher slurm spreads the cells over a cluster (a
job re-plans from the same command line; with --confirm the confirmation round is planned once the first
has finished). The cost is printed before any work: training FLOPs (training.flops) and the time at
200 GFLOP/s.

Base shape (phase-cell: 2 layers, 4 heads, d_model 64, n_ctx 64, batch 16, 600 steps, lr 2e-3 with 50
warm-up steps, evaluated and probed every 25 steps from step 0). Measured through this command on a
2-core machine shared with other jobs (load ~4.5), with one torch thread (OMP_NUM_THREADS=1; at that load
two threads made a cell ~8x slower): ffn_only L2 12 s (2.93 nats, between, still falling), ffn_only L6
32 s (3.32, on the floor), full L2 12 s (2.33) and full L6 35 s (2.29), both below bigram (2.49): full
learns context, so places mean something. At 300 steps full L2 stayed at the bigram level (2.46), hence
600. Those 4 runs are 3.9 TFLOP by training.flops and trained in ~92 s (~42 GFLOP/s effective: per-step
overhead, not matmuls, dominates at these shapes). The default grid is 46.6 TFLOP: 3.9 min at 200
GFLOP/s, ~18 min at the rate measured here; --confirm adds 9x each floor or boundary cell.
Re-measured alone on the 2-core machine, two threads, matmul peak 139 GFLOP/s: the default grid's 48
runs in 1454 s (ffn_only L1 10 s, L2 19 s, L6 43 s; full L2 16 s, L6 54 s; ffn_only L4 width 128 68 s).
Where ffn_only stops at 600 steps is not where it stops at 1800 (docs/results/phase_diagram.md: the floor
erodes at depth 3).

results.json schema ("phase-diagram/1"):
    schema, experiment, preset, seeds, config {model, train, overrides, variants: cell name -> overrides}
    margin, confirm, early_step, references
    slices           [{base: coords, axes: {axis: values}}]: the grid as asked for
    reference_levels {"unigram", "bigram", ...} on the fixed validation batches
    runs             one per (cell, seed): variant, seed, run_dir, final_val_loss, best_val_loss, best_step,
                     steps, wall_time_s, tokens_per_s, threads (torch threads it trained with, null if
                     not recorded), val_curve, train_curve, tail {from_step, drop,
                     slope_per_1k, log_pace, projected}, features {grad0, grad_warm, alpha_early,
                     identity_early, growth_early, identity_end, growth_end} (null where not recorded)
    cells            one per cell: name, role ("grid" | "reference"), coords {residual, n_layers, lr, d_model,
                     self_bias}, seeds, final_val_loss {mean, std, min, max, n}, relative_loss ((mean - bigram) /
                     (unigram - bigram): 1 floor, 0 bigram), projected_val_loss {...}, place, seed_places,
                     provisional, heading, boundary (null without --confirm; true for the floor and boundary
                     cells --confirm confirms), confirm (null, or {name, seeds,
                     steps, final_val_loss, relative_loss, place, seed_places, provisional, heading}),
                     final_place, final_provisional (the confirmed place where confirmation ran, else place),
                     changed (final_place differs from place)
    views            one per slice view: title, residual, x, xs, y, ys, fixed, sentence
    boundary         the sentences, in view order
    predictor        feature -> {n, n_collapsed, loo_accuracy, loo_interval, majority_accuracy, split_accuracy,
                     n_splits, auc, auc_interval, threshold [cut, above], predicts} or {n, n_collapsed, untestable}
    predictor_runs   [{variant, seed, collapsed, features}] (grid cells' first-pass runs)
    predictor_final  null without --confirm; else predictor's test with each run's outcome its cell's final
                     place (confirmed where that ran), seed-split cells' runs left out
    estimate         {flops, seconds_at_200_gflops}: the training FLOPs of every run the results cover, and
                     the seconds they take at 200 GFLOP/s, to set beside train_wall_time_s
    software, train_wall_time_s, wall_time_s, created
"""

from __future__ import annotations

from typing import Any

from experiments.phase_diagram.boundary import FLOOR, SPLIT, cell_place, claim_cells, sentence, views
from experiments.phase_diagram.collapse_predictor import EarlyIdentity, evaluate, features
from experiments.phase_diagram.grid import (
    AXES,
    CONFIRM_FACTOR,
    CONFIRM_SEEDS,
    REFERENCES,
    Cell,
    base_cell,
    confirm_seeds,
    default_slices,
    full_reference,
    grid_cells,
    parse_axes,
    parse_references,
    reference_cells,
    slices_of,
)
from experiments.phase_diagram.report import sections, summary, table
from experiments.runner.cost import ASSUMED_FLOPS, cost_line, grid_cost
from experiments.runner.frame import Context, Experiment, Group, Job, Variant, check_number, run_summary
from experiments.shared.places import place
from experiments.shared.plan import by_variant
from experiments.statistics.stats import PACE_FACTOR, stats, tail
from interp.command.cli import default_option
from interp.errors import ToolkitError

SCHEMA = "phase-diagram/1"
DEFAULT_MARGIN = 0.05
DEFAULT_EARLY = 100


def add_arguments(p) -> None:
    g = p.add_argument_group("the grid")
    axes = f"an axis of one product grid instead of the default grid (repeatable); axes: {', '.join(AXES)}"
    g.add_argument("--axes", action="append", default=[], metavar="AXIS=V1,V2,...", help=axes)
    g.add_argument(
        "--references",
        default=",".join(REFERENCES),
        help="residuals trained at every depth and width of the grid as references "
        "(default full,attn_only; '' for none)",
    )
    default_option(g, "--margin", DEFAULT_MARGIN, "nats within which a loss counts as at a level")
    g.add_argument(
        "--confirm",
        action="store_true",
        help=f"rerun the cells on the floor and next to its boundary with 3 seeds at {CONFIRM_FACTOR}x the "
        "steps, in rounds until every cell the sentences rest on is confirmed",
    )
    g.add_argument(
        "--early-step",
        type=int,
        help=f"the evaluation step the early features are read at (default: the last evaluation "
        f"step <= {DEFAULT_EARLY} before max_steps, else the first one)",
    )


def check(args) -> None:
    from training.presets import parse_overrides

    axes = parse_axes(args.axes)
    # a --set of a key every cell sets itself would be recorded as applied but change nothing
    varied = set(axes) if axes else {"n_layers"}  # the default grid sets depth everywhere; lr, d_model, self_bias
    taken = sorted(varied & set(parse_overrides(args.set)))  # are its base values (the other slices, references)
    if taken:
        raise ToolkitError(
            f"--set {taken[0]}=... would be overridden by the grid's cells, which set "
            f"{taken[0]} themselves; give its values with --axes {taken[0]}=V1,V2,..."
        )
    parse_references(args.references)
    check_number("--margin", args.margin, 0.0, inclusive=False)
    if args.early_step is not None:
        check_number("--early-step", args.early_step, 1)


class PhaseGrid:
    """The grid a command line asks for: slices, their cells, the reference cells."""

    def __init__(self, ctx: Context):
        self.base = base_cell(ctx.spec)
        axes = parse_axes(ctx.args.axes)
        self.slices = slices_of(axes, self.base) if axes else default_slices(self.base)
        self.cells = grid_cells(self.slices)
        self.references = reference_cells(self.cells, self.base, parse_references(ctx.args.references))
        self.every = self.cells + self.references
        train = ctx.spec.train
        self.ratio = train.min_lr / train.lr
        self.steps = train.max_steps

    def variant(self, cell: Cell) -> Variant:
        return Variant(cell.name, cell.overrides(self.ratio))

    def confirm_variant(self, cell: Cell) -> Variant:
        return Variant(
            f"{cell.name} x{CONFIRM_FACTOR}", {**cell.overrides(self.ratio), "max_steps": CONFIRM_FACTOR * self.steps}
        )


def plan(ctx: Context) -> list[Group]:
    train = ctx.spec.train
    if ctx.args.early_step is None:  # a preset's own evaluation steps decide (smoke evaluates every 10)
        ctx.args.early_step = default_early_step(train)
    early = ctx.args.early_step
    if early >= train.max_steps or not train.is_eval_step(early):
        raise ToolkitError(
            f"--early-step {early} must be an evaluation step before max_steps {train.max_steps} "
            f"(a multiple of eval_interval {train.eval_interval} from eval_from on)"
        )
    if ctx.spec.model.n_ctx < 2:
        raise ToolkitError(f"the phase diagram needs n_ctx >= 2 (context to route), got {ctx.spec.model.n_ctx}")
    grid = PhaseGrid(ctx)
    if ctx.args.confirm and max(confirm_seeds(ctx.seeds[0])) >= 2**63:  # refused now, not after the first pass
        first = ctx.seeds[0]
        raise ToolkitError(
            f"--confirm trains seeds {first} to {first + CONFIRM_SEEDS - 1}, past 2**63 - 1 (what "
            f"torch's generators take); give a first seed below {2**63 - CONFIRM_SEEDS + 1}"
        )
    groups = [
        Group(ctx.spec, [grid.variant(c) for c in grid.every], callbacks=lambda variant, seed: [EarlyIdentity(early)])
    ]
    if ctx.args.confirm:
        places = finished_places(ctx, grid)
        if places is not None:  # the first pass has finished: the boundary is known from its places
            boundary = confirm_cells(grid, *places)
            if boundary:
                confirming = [grid.confirm_variant(c) for c in boundary]
                groups.append(Group(ctx.spec, confirming, probes=False, seeds=confirm_seeds(ctx.seeds[0])))
    return groups


def default_early_step(train) -> int:
    """The last evaluation step <= DEFAULT_EARLY before max_steps, else the first evaluation step."""
    steps = [k for k in range(1, train.max_steps) if train.is_eval_step(k)]
    if not steps:
        raise ToolkitError(
            f"the phase diagram reads early features at an evaluation step before max_steps "
            f"{train.max_steps}, and this shape has none; lower eval_interval or eval_from"
        )
    return max((k for k in steps if k <= DEFAULT_EARLY), default=steps[0])


def confirm_cells(grid: PhaseGrid, first: dict[Cell, dict], confirmed: dict[Cell, dict]) -> list[Cell]:
    """The cells to confirm: those on the floor or at its boundary in the final places (confirmed where
    that ran; phase_boundary.claim_cells), and those already confirmed. A confirmation that moves the
    boundary puts new cells beside it; they are confirmed in turn (the frame plans again after each
    round) until every cell the sentences rest on is confirmed."""
    final = {c: confirmed.get(c, p) for c, p in first.items()}
    cells = set(claim_cells(final, grid.cells)) | set(confirmed)
    return [c for c in grid.cells if c in cells]


def finished_places(ctx: Context, grid: PhaseGrid) -> tuple[dict, dict] | None:
    """(first-pass places, confirmed places) from the run directories; None while a first-pass run is
    unfinished. A cell is confirmed once all its confirmation runs have finished."""
    from training.rundir import RunDir

    def load(name: str, seeds: list[int]) -> list[dict[str, Any]] | None:
        runs = [RunDir.of(ctx.out, ctx.spec.preset, name, seed) for seed in seeds]
        if not all(r.finished for r in runs):
            return None
        early, warm, pairs = ctx.args.early_step, ctx.spec.train.warmup_steps, zip(seeds, runs, strict=True)
        return [summarise_cell({"seed": s, **r.load(), "variant": name}, early, warm) for s, r in pairs]

    runs = {}
    for c in grid.every:  # an unfinished first pass is known at its first unfinished cell: nothing more is read
        if (rs := load(c.name, ctx.seeds)) is None:
            return None
        runs[c.name] = rs
    suffix, seeds = f" x{CONFIRM_FACTOR}", confirm_seeds(ctx.seeds[0])
    for c in grid.cells:
        if (rs := load(c.name + suffix, seeds)) is not None:
            runs[c.name + suffix] = rs
    levels = ctx.reference_levels()
    margin = ctx.args.margin
    return places_of(runs, grid.every, levels, margin), places_of(runs, grid.every, levels, margin, suffix)


# ----- analysis -----------------------------------------------------------------------------------------


def summarise_cell(record: dict[str, Any], early: int, warmup: int) -> dict[str, Any]:
    """run_summary's numbers, the tail (3x projection) and the early features of one run."""
    return {
        **run_summary(record),
        "tail": tail(record["val_curve"]["steps"], record["val_curve"]["loss"], PACE_FACTOR),
        "features": features(record.get("probes", {}), warmup, early),
    }


def places_of(
    runs: dict[str, list[dict[str, Any]]], cells: list[Cell], levels: dict[str, float], margin: float, suffix: str = ""
) -> dict[Cell, dict[str, Any]]:
    """Each cell's place (phase_boundary.cell_place) from its runs (variant name + suffix -> runs).

    "near full" compares with full trained as long (the same suffix); a confirmation run (3x the steps)
    has no such full, so its place never reads "near full" against a full a third as long."""

    def mean_loss(cell: Cell) -> float | None:
        rs = runs.get(cell.name + suffix)
        return stats([r["final_val_loss"] for r in rs])["mean"] if rs else None

    out = {}
    for cell in cells:
        rs = runs.get(cell.name + suffix)
        if not rs:
            continue
        ref = full_reference(cell, {c: None for c in cells if c.name in runs})
        losses, projected = [r["final_val_loss"] for r in rs], [r["tail"]["projected"] for r in rs]
        out[cell] = cell_place(losses, projected, levels, mean_loss(ref) if ref else None, margin)
    return out


def relative(loss: float, levels: dict[str, float]) -> float:
    """(loss - bigram) / (unigram - bigram): 1 at the floor, 0 at the bigram level, below 0 using context."""
    return (loss - levels["bigram"]) / (levels["unigram"] - levels["bigram"])


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    grid = PhaseGrid(ctx)
    levels, margin = ctx.levels, ctx.args.margin
    warmup = ctx.spec.train.warmup_steps
    runs = [summarise_cell(r, ctx.args.early_step, warmup) for r in records]
    by_name = by_variant(runs)
    first = places_of(by_name, grid.every, levels, margin)
    suffix = f" x{CONFIRM_FACTOR}"
    confirmed = places_of(by_name, grid.every, levels, margin, suffix)
    boundary = set(confirm_cells(grid, first, confirmed)) if ctx.args.confirm else None
    final = {c: confirmed.get(c, p) for c, p in first.items()}
    cells = []
    for c in grid.every:
        rs = by_name.get(c.name, [])
        loss = stats([r["final_val_loss"] for r in rs])
        item = {
            "name": c.name,
            "role": "grid" if c in grid.cells else "reference",
            "coords": c.coords(),
            "seeds": [r["seed"] for r in rs],
            "final_val_loss": loss,
            "relative_loss": relative(loss["mean"], levels),
            "projected_val_loss": stats([r["tail"]["projected"] for r in rs]),
            **first[c],
            "boundary": None if boundary is None else c in boundary,
            "confirm": None,
        }
        if c in confirmed:
            cr = by_name[c.name + suffix]
            closs = stats([r["final_val_loss"] for r in cr])
            item["confirm"] = {
                "name": c.name + suffix,
                "seeds": [r["seed"] for r in cr],
                "steps": cr[0]["steps"],
                "final_val_loss": closs,
                "relative_loss": relative(closs["mean"], levels),
                **confirmed[c],
            }
        item["final_place"], item["final_provisional"] = final[c]["place"], final[c]["provisional"]
        item["changed"] = final[c]["place"] != first[c]["place"]
        cells.append(item)
    done = None if boundary is None else {c: c in confirmed for c in boundary}
    view_items = _view_items(grid, final, done)
    samples = []
    for c in grid.cells:
        for r in by_name.get(c.name, []):
            collapsed = place(r["final_val_loss"], levels, None, margin) == FLOOR
            samples.append(
                {"variant": r["variant"], "seed": r["seed"], "features": r["features"], "collapsed": collapsed}
            )
    # the same early features against each cell's final place (3 seeds at 3x where confirmed): the first
    # pass's 600-step outcomes are not final (the floor erodes), so a verdict on them alone is not one
    of_cell = {c.name: final[c]["place"] for c in grid.cells}
    settled = [{**x, "collapsed": of_cell[x["variant"]] == FLOOR} for x in samples if of_cell[x["variant"]] != SPLIT]
    return {
        "margin": margin,
        "confirm": ctx.args.confirm,
        "early_step": ctx.args.early_step,
        "references": list(parse_references(ctx.args.references)),
        "slices": [s.to_dict() for s in grid.slices],
        "runs": runs,
        "cells": cells,
        "views": view_items,
        "boundary": [v["sentence"] for v in view_items],
        "predictor": evaluate(samples),
        "predictor_runs": samples,
        "predictor_final": evaluate(settled) if ctx.args.confirm else None,
        "estimate": grid_cost(EXPERIMENT.jobs(ctx)),
    }


def _view_items(grid: PhaseGrid, final: dict, done: dict | None) -> list[dict[str, Any]]:
    """Every slice's views (boundary.views), each with the sentence it says of the cells' final places."""
    return [
        {
            "title": v.title(),
            "residual": v.residual,
            "x": v.x,
            "xs": list(v.xs),
            "y": v.y,
            "ys": list(v.ys),
            "fixed": dict(v.fixed),
            "sentence": sentence(v, final, done),
        }
        for s in grid.slices
        for v in views(s)
    ]


def preface(ctx: Context, jobs: list[Job]) -> str:
    line, e = cost_line(ctx, jobs, timed=True)
    if ctx.args.launcher == "local" and e["flops_to_train"]:
        line += f"; runs train in ensembles of up to {ctx.args.ensemble_size}"
    else:
        line += (
            f": about {e['seconds_at_200_gflops'] / 60:.1f} min at {ASSUMED_FLOPS / 1e9:.0f} GFLOP/s (small "
            "shapes run well below a machine's matmul peak)"
        )
    if ctx.args.confirm and not any(j.variant.name.endswith(f" x{CONFIRM_FACTOR}") for j in jobs):
        line += (
            f"; --confirm then adds {CONFIRM_SEEDS * CONFIRM_FACTOR}x the cost of each cell on the floor or "
            "next to its boundary, planned once these have finished"
        )
    return line


EXPERIMENT = Experiment(
    name="phase_diagram",
    schema=SCHEMA,
    doc=__doc__,
    title="Phase diagram",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=check,
    owned={"residual": "--axes residual=..."},
    default_preset="phase-cell",
    replan=True,
    preface=preface,
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
