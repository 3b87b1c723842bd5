"""python -m experiments.residual_sweep: the paper's residual tables - four residual configs x seeds.

The four configurations of a Pre-LN block (docs/DESIGN.md):

    full       both identity paths              attn_only  attention residual only (FFN one removed)
    ffn_only   FFN residual only (attention one removed)    none       neither

are trained for every seed (runs in <out>/<preset>/<config>/seed<k>/, laid out as in every other experiment
of this toolkit: a finished run directory of the same preset, config and seed copied there is reused, not
retrained; rerunning trains only what has not finished). Each config is summarised by the mean +/- std and range of its
final and best validation loss (fixed validation batches), its ratio to `full`, its gap to `none`, and a
classification:

    collapses  mean final val >= floor - margin, where floor = min(unigram level, mean final val of `none`)
               and margin = max(--margin (0.05 nats), 3 x the config's seed std of final val)
    recovers   otherwise

For paper-10m and paper-124m the paper's reported numbers stand in their own column.

results.json schema ("residual-sweep/1"):
    schema, experiment   "residual-sweep/1", "residual_sweep"
    preset, seeds        what was run
    margin               the classification margin (nats) before the 3-std widening
    rule                 the classification rule, in words
    config               {"model", "train"} of the preset with --set overrides, "overrides",
                         "variants" (name -> overrides)
    reference_levels     {"unigram", "bigram", "n_targets", ...} on the fixed validation batches (train-split counts)
    runs                 one per (config, seed): variant, seed, run_dir, final_val_loss, best_val_loss, best_step,
                         steps, wall_time_s, tokens_per_s, val_curve {steps, loss}, train_curve {steps, loss}
    configs              name -> {final_val_loss, best_val_loss: {mean, std, min, max, n}, ratio_to_full, gap_to_none,
                         floor, margin, classification ("recovers" | "collapses"), collapsed_seeds [seed],
                         paper (null, or {mean, std, n, text}), delta_vs_paper (mean final - paper mean, or null)}
    paper                the paper's reported numbers for this preset (name -> {mean, std, n, text}), or null
    software             library versions
    train_wall_time_s    sum of the runs' wall times; wall_time_s: this invocation; created: UTC timestamp
"""

from __future__ import annotations

from typing import Any

from experiments.runner.frame import Context, Experiment, Group, Variant, check_number, run_summary
from experiments.runner.text import fmt_number, fmt_stats, reference_lines, seed_curves
from experiments.shared.plan import by_variant
from experiments.statistics.stats import stats
from interp.command.cli import default_option

SCHEMA = "residual-sweep/1"
CONFIGS = ("full", "attn_only", "ffn_only", "none")
DEFAULT_MARGIN = 0.05
RULE = (
    "collapses = mean final val >= floor - margin, floor = min(unigram level, mean final val of `none`), "
    "margin = max({margin:g} nats, 3 x the config's seed std); recovers otherwise"
)


def _paper(mean: float, std: float | None, n: int | None) -> dict[str, Any]:
    text = f"{mean:.3f}" + (f" +/- {std:.3f}" if std is not None else "") + (f" ({n} seed{'s' * (n > 1)})" if n else "")
    return {"mean": mean, "std": std, "n": n, "text": text}


# The paper's reported validation losses (it does not say final or best; compared here with the final val loss).
PAPER = {
    "paper-10m": {
        "full": _paper(1.502, None, 1),
        "attn_only": _paper(1.580, 0.003, 8),
        "ffn_only": _paper(3.350, 0.002, 8),
        "none": _paper(3.356, None, None),
    },
    "paper-124m": {
        "full": _paper(4.577, 0.012, 5),
        "attn_only": _paper(6.037, 0.355, 5),
        "ffn_only": _paper(7.569, 0.001, 5),
    },
}


def summarise_configs(
    runs: list[dict[str, Any]], levels: dict[str, Any], margin: float, paper: dict[str, Any] | None
) -> dict[str, Any]:
    by_config = by_variant(runs)
    finals = {name: stats([r["final_val_loss"] for r in rs]) for name, rs in by_config.items()}
    full = finals.get("full", {}).get("mean")
    none = finals.get("none", {}).get("mean")
    floor = min(levels["unigram"], none) if none is not None else levels["unigram"]
    out = {}
    for name, rs in by_config.items():
        final = finals[name]
        used = max(margin, 3 * final["std"])
        ref = (paper or {}).get(name)
        out[name] = {
            "final_val_loss": final,
            "best_val_loss": stats([r["best_val_loss"] for r in rs]),
            "ratio_to_full": final["mean"] / full if full else None,
            "gap_to_none": final["mean"] - none if none is not None else None,
            "floor": floor,
            "margin": used,
            "classification": "collapses" if final["mean"] >= floor - used else "recovers",
            "collapsed_seeds": [r["seed"] for r in rs if r["final_val_loss"] >= floor - margin],
            "paper": ref,
            "delta_vs_paper": final["mean"] - ref["mean"] if ref else None,
        }
    return out


def table_rows(configs: dict[str, Any], with_paper: bool) -> tuple[list[str], list[list[str]]]:
    headers = ["config", "final val", "best val", "ratio/full", "gap/none", "class", "collapsed seeds"]
    if with_paper:
        headers += ["paper", "ours - paper"]
    rows = []
    for name, c in configs.items():
        row = [
            name,
            fmt_stats(c["final_val_loss"]),
            fmt_stats(c["best_val_loss"]),
            fmt_number(c["ratio_to_full"], ".2f"),
            fmt_number(c["gap_to_none"], "+.3f"),
            c["classification"],
            f"{len(c['collapsed_seeds'])}/{c['final_val_loss']['n']}",
        ]
        if with_paper:
            row += [c["paper"]["text"] if c["paper"] else "-", fmt_number(c["delta_vs_paper"], "+.3f")]
        rows.append(row)
    return headers, rows


def add_arguments(p) -> None:
    default_option(p, "--margin", DEFAULT_MARGIN, "classification margin in nats, widened to 3 seed-std when larger")


def plan(ctx: Context) -> list[Group]:
    return [Group(ctx.spec, [Variant.of(residual=name) for name in CONFIGS])]


def analyse(ctx: Context, records: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [run_summary(r) for r in records]
    paper = PAPER.get(ctx.spec.preset)
    return {
        "margin": ctx.args.margin,
        "rule": RULE.format(margin=ctx.args.margin),
        "runs": runs,
        "configs": summarise_configs(runs, ctx.levels, ctx.args.margin, paper),
        "paper": paper,
    }


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    return table_rows(results["configs"], results["paper"] is not None)


def summary(results: dict[str, Any]) -> str:
    text = f"rule: {results['rule']}"
    if results["paper"] is not None:
        text += "\npaper: the paper's reported val loss for this setting (final or best unstated; compared with final)"
    return text


def sections(results: dict[str, Any], ctx: Context) -> list:
    import plotly.graph_objects as go

    from interp.figures.plots import PALETTE, loss_curves, reference_line

    refs = reference_lines(results["reference_levels"])
    runs = results["runs"]
    val, train = seed_curves(runs), seed_curves(runs, "train_curve")
    dots = go.Figure()
    for i, (name, c) in enumerate(results["configs"].items()):
        rs = [r for r in runs if r["variant"] == name]
        dots.add_scatter(
            x=[name] * len(rs),
            y=[r["final_val_loss"] for r in rs],
            mode="markers",
            name=f"{name} (ours)",
            text=[f"seed {r['seed']}" for r in rs],
            marker=dict(color=PALETTE[i % len(PALETTE)], size=9),
        )
        if p := c["paper"]:
            dots.add_scatter(
                x=[name],
                y=[p["mean"]],
                mode="markers",
                name=f"{name} (paper)",
                error_y=dict(type="data", array=[p["std"] or 0.0], visible=True),
                marker=dict(color=PALETTE[i % len(PALETTE)], symbol="diamond-open", size=13),
            )
    for label, value in refs.items():
        reference_line(dots, value, f"{label} {value:.3f}")
    dots.update_layout(
        title="Final validation loss per seed (diamonds: the paper's reported mean +/- std)",
        yaxis_title="val loss (nats)",
    )
    text = f"Classification rule: {results['rule']}."
    if results["paper"] is not None:
        text += (
            " The paper column is the paper's reported validation loss for this setting; the paper does not say "
            "whether it is the final or the best value, so it is compared with the final one."
        )
    return [
        text,
        ("Final validation loss", dots),
        ("Validation loss", loss_curves(val, refs, title="Validation loss (fixed batches)")),
        ("Training loss", loss_curves(train, refs, title="Training loss")),
    ]


EXPERIMENT = Experiment(
    name="residual_sweep",
    schema=SCHEMA,
    doc=__doc__,
    title="Residual sweep",
    plan=plan,
    analyse=analyse,
    table=table,
    summary=summary,
    sections=sections,
    add_arguments=add_arguments,
    check=lambda args: check_number("--margin", args.margin, 0.0),
    owned={"residual": "the four configs are always run"},
)

if __name__ == "__main__":
    raise SystemExit(EXPERIMENT.main())
