"""python -m experiments.residual_sweep: the paper's residual tables - four residual configs x seeds.

The four configurations of a Pre-LN block (DESIGN.md):

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

import math
import time
from pathlib import Path
from typing import Any

from experiments.common import (
    Variant,
    base_parser,
    cli,
    fmt_stats,
    format_table,
    levels_line,
    parse_seeds,
    reference_levels,
    reference_lines,
    refuse_overrides,
    run_grid,
    run_summary,
    software_versions,
    spec_from_args,
    stats,
    table_figure,
    write_results,
)
from interp.errors import ToolkitError

SCHEMA = "residual-sweep/1"
CONFIGS = ("full", "attn_only", "ffn_only", "none")
DEFAULT_MARGIN = 0.05
RULE = ("collapses = mean final val >= floor - margin, floor = min(unigram level, mean final val of `none`), "
        "margin = max({margin:g} nats, 3 x the config's seed std); recovers otherwise")


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


def make_variants() -> list[Variant]:
    return [Variant(name, {"residual": name}) for name in CONFIGS]


def summarise_configs(runs: list[dict[str, Any]], levels: dict[str, Any], margin: float,
                      paper: dict[str, Any] | None) -> dict[str, Any]:
    by_config: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_config.setdefault(r["variant"], []).append(r)
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


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def table_rows(configs: dict[str, Any], with_paper: bool) -> tuple[list[str], list[list[str]]]:
    headers = ["config", "final val", "best val", "ratio/full", "gap/none", "class", "collapsed seeds"]
    if with_paper:
        headers += ["paper", "ours - paper"]
    rows = []
    for name, c in configs.items():
        row = [name, fmt_stats(c["final_val_loss"]), fmt_stats(c["best_val_loss"]), _num(c["ratio_to_full"], ".2f"),
               _num(c["gap_to_none"], "+.3f"), c["classification"],
               f"{len(c['collapsed_seeds'])}/{c['final_val_loss']['n']}"]
        if with_paper:
            row += [c["paper"]["text"] if c["paper"] else "-", _num(c["delta_vs_paper"], "+.3f")]
        rows.append(row)
    return headers, rows


def write_report(path: Path, results: dict[str, Any]) -> Path:
    import plotly.graph_objects as go

    from interp.plots import PALETTE, loss_curves, save_html

    levels = results["reference_levels"]
    refs = reference_lines(levels)
    levels_text = levels_line(levels).capitalize()
    runs = results["runs"]
    headers, rows = table_rows(results["configs"], results["paper"] is not None)
    val = {f"{r['variant']}/seed{r['seed']}": (r["val_curve"]["steps"], r["val_curve"]["loss"]) for r in runs}
    train = {f"{r['variant']}/seed{r['seed']}": (r["train_curve"]["steps"], r["train_curve"]["loss"]) for r in runs}
    dots = go.Figure()
    for i, (name, c) in enumerate(results["configs"].items()):
        rs = [r for r in runs if r["variant"] == name]
        dots.add_trace(go.Scatter(x=[name] * len(rs), y=[r["final_val_loss"] for r in rs], mode="markers",
                                  name=f"{name} (ours)", text=[f"seed {r['seed']}" for r in rs],
                                  marker=dict(color=PALETTE[i % len(PALETTE)], size=9)))
        if c["paper"]:
            p = c["paper"]
            dots.add_trace(go.Scatter(x=[name], y=[p["mean"]], mode="markers", name=f"{name} (paper)",
                                      error_y=dict(type="data", array=[p["std"] or 0.0], visible=True),
                                      marker=dict(color=PALETTE[i % len(PALETTE)], symbol="diamond-open", size=13)))
    for label, value in refs.items():
        dots.add_hline(y=value, line=dict(dash="dash", color="#555", width=1), annotation_text=f"{label} {value:.3f}")
    dots.update_layout(title="Final validation loss per seed (diamonds: the paper's reported mean +/- std)",
                       yaxis_title="val loss (nats)")
    intro = (f"Preset {results['preset']}, seeds {results['seeds']}. Validation loss on the fixed validation batches "
             f"(seed 99991). {levels_text}. Classification rule: {results['rule']}.")
    if results["paper"] is not None:
        intro += (" The paper column is the paper's reported validation loss for this setting; the paper does not say "
                  "whether it is the final or the best value, so it is compared with the final one.")
    sections = [
        intro,
        ("Summary", table_figure(headers, rows)),
        ("Final validation loss", dots),
        ("Validation loss", loss_curves(val, refs, title="Validation loss (fixed batches)")),
        ("Training loss", loss_curves(train, refs, title="Training loss")),
    ]
    return save_html(sections, path, title=f"Residual sweep - {results['preset']}")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser("python -m experiments.residual_sweep", __doc__.split("results.json schema")[0],
                         default_out="runs/residual_sweep")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help=f"classification margin in nats, widened to 3 seed-std when larger "
                             f"(default {DEFAULT_MARGIN})")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if not (args.margin >= 0 and math.isfinite(args.margin)):
        raise ToolkitError(f"--margin must be a non-negative number of nats, got {args.margin}")
    spec = spec_from_args(args)
    refuse_overrides(spec, {"residual": "the four configs are always run"})
    seeds = parse_seeds(args.seeds, [spec.train.seed])
    variants = make_variants()
    from training.data import load_corpus

    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    levels = reference_levels(spec, corpus)
    out = Path(args.out)
    result_dir = out / spec.preset
    print(f"residual sweep: preset {spec.preset}, seeds {seeds}, {len(variants) * len(seeds)} runs -> {result_dir}")
    records = run_grid(spec, variants, seeds, out, progress=not args.no_progress, corpus=corpus)
    runs = [run_summary(r) for r in records]
    paper = PAPER.get(spec.preset)
    configs = summarise_configs(runs, levels, args.margin, paper)
    rule = RULE.format(margin=args.margin)
    results = {
        "schema": SCHEMA,
        "experiment": "residual_sweep",
        "preset": spec.preset,
        "seeds": seeds,
        "margin": args.margin,
        "rule": rule,
        "config": {"model": spec.model.to_dict(), "train": spec.train.to_dict(), "overrides": spec.overrides,
                   "variants": {v.name: v.overrides for v in variants}},
        "reference_levels": levels,
        "runs": runs,
        "configs": configs,
        "paper": paper,
        "software": software_versions(),
        "train_wall_time_s": sum(r["wall_time_s"] for r in runs),
    }
    results["wall_time_s"] = time.perf_counter() - start
    write_results(result_dir / "results.json", results)
    headers, rows = table_rows(configs, paper is not None)
    print()
    print(levels_line(levels))
    print(format_table(headers, rows))
    print(f"rule: {rule}")
    if paper is not None:
        print("paper: the paper's reported val loss for this setting (final or best unstated; compared with final)")
    if not args.no_report:
        write_report(result_dir / "report.html", results)
        print(f"report: {result_dir / 'report.html'}")
    print(f"results: {result_dir / 'results.json'}  (wall time {time.perf_counter() - start:.0f}s)")
    return 0


run = cli(main)

if __name__ == "__main__":
    raise SystemExit(run())
