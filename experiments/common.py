"""What every experiment shares: run grids through the trainer, read run directories,
reference levels, summary statistics, results files and the command-line frame.

Layout (DESIGN.md contract 3): <out>/<preset>/<variant>/seed<k>/ per run, and
<out>/<preset>/results.json + report.html per experiment.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from interp.errors import ToolkitError
from training.presets import PRESETS, RunSpec, parse_overrides, resolve


@dataclass(frozen=True)
class Variant:
    """A named change to the preset: model/train overrides, and an optional model_init(model)."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    model_init: Callable | None = None

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.name).strip("_")  # "attn_only + uniform" -> attn_only_uniform


def run_dir(out: Path, preset: str, variant: Variant, seed: int) -> Path:
    return Path(out) / preset / variant.slug / f"seed{seed}"


def load_run(directory: Path) -> dict[str, Any]:
    """A finished run directory as plain data: final record, metric curves, probe records by kind."""
    from training.trainer import read_jsonl  # training imports transformer_lens: only when runs are read

    directory = Path(directory)
    final = json.loads((directory / "final.json").read_text())
    metrics = read_jsonl(directory / "metrics.jsonl")
    probes: dict[str, list[dict[str, Any]]] = {}
    for record in read_jsonl(directory / "probes.jsonl"):
        probes.setdefault(record["probe"], []).append(record)
    curve = [(r["step"], r["val_loss"]) for r in metrics if "val_loss" in r]
    train_curve = [(r["step"], r["train_loss"]) for r in metrics if "train_loss" in r]
    return {
        "run_dir": str(directory),
        "final": final,
        "val_curve": {"steps": [s for s, _ in curve], "loss": [v for _, v in curve]},
        "train_curve": {"steps": [s for s, _ in train_curve], "loss": [v for _, v in train_curve]},
        "probes": probes,
    }


def run_grid(
    spec: RunSpec,
    variants: list[Variant],
    seeds: list[int],
    out: Path,
    progress: bool = True,
    probes: bool = True,
    corpus=None,
    callbacks: Callable[[Variant, int], list] | None = None,
) -> list[dict[str, Any]]:
    """Train every (variant, seed) not yet finished; return each run's load_run() record.

    Finished runs (final.json present) are read, not retrained; interrupted ones resume.
    callbacks(variant, seed), when given, returns extra trainer callbacks for that run.
    """
    from tqdm.auto import tqdm

    from probes import default_callbacks
    from training.data import load_corpus
    from training.trainer import Trainer

    corpus = corpus if corpus is not None else load_corpus(spec.train.corpus, spec.train.data_path)
    jobs = [(v, s) for v in variants for s in seeds]
    records = []
    bar = tqdm(jobs, desc="runs", unit="run", disable=not progress, dynamic_ncols=True)
    for variant, seed in bar:
        bar.set_postfix_str(f"{variant.name} seed {seed}")
        s = resolve(spec.preset, {**spec.overrides, **variant.overrides, "seed": seed})
        directory = run_dir(out, spec.preset, variant, seed)
        run_callbacks = default_callbacks(s.train) if probes and s.train.probes else []
        if callbacks is not None:
            run_callbacks = [*run_callbacks, *callbacks(variant, seed)]
        trainer = Trainer(
            s.model, s.train, directory, callbacks=run_callbacks, corpus=corpus, progress=progress,
            meta={"preset": spec.preset, "variant": variant.name, "seed": seed}, model_init=variant.model_init,
        )
        trainer.run()
        record = load_run(directory)
        record.update(variant=variant.name, seed=seed)
        records.append(record)
    bar.close()
    return records


def run_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The per-run metrics every experiment reports, from a run_grid() record."""
    final = record["final"]
    return {
        "variant": record["variant"],
        "seed": record["seed"],
        "run_dir": record["run_dir"],
        "final_val_loss": final["final_val_loss"],
        "best_val_loss": final["best_val_loss"],
        "best_step": final["best_step"],
        "steps": final["steps"],
        "wall_time_s": final["wall_time_s"],
        "tokens_per_s": final["tokens_per_s"],
        "val_curve": record["val_curve"],
        "train_curve": record["train_curve"],
    }


def reference_lines(levels: dict[str, Any]) -> dict[str, float]:
    """The two levels as named horizontal lines for interp.plots.loss_curves."""
    return {"unigram (floor)": levels["unigram"], "bigram (current token only)": levels["bigram"]}


def levels_line(levels: dict[str, Any]) -> str:
    """The reference levels as one console line."""
    return (f"reference levels (fixed validation batches, train-split counts, add-one smoothing): "
            f"unigram {levels['unigram']:.3f}, bigram {levels['bigram']:.3f} nats")


def stats(values: list[float]) -> dict[str, float]:
    """mean, sample std (0 for one value), min, max, n."""
    values = [float(v) for v in values]
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def fmt_stats(s: dict[str, float], digits: int = 3) -> str:
    if s["n"] == 1:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} +/- {s['std']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table for the console: columns padded to their widest cell, a rule under the header."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table_figure(headers: list[str], rows: list[list[Any]], title: str = ""):
    """The same table as a plotly figure, for report.html."""
    import plotly.graph_objects as go

    columns = [["" if row[i] is None else str(row[i]) for row in rows] for i in range(len(headers))]
    fig = go.Figure(go.Table(header=dict(values=[str(h) for h in headers], align="left", fill_color="#e8eef7"),
                             cells=dict(values=columns, align="left")))
    fig.update_layout(title=title or None, height=100 + 48 * max(1, len(rows)), margin=dict(l=10, r=10, t=40, b=10))
    return fig


def reference_levels(spec: RunSpec, corpus=None) -> dict[str, Any]:
    """Unigram / bigram cross-entropy of the fixed validation batches under train-split counts."""
    from training.data import fixed_batches, load_corpus
    from training.data import reference_levels as levels

    corpus = corpus if corpus is not None else load_corpus(spec.train.corpus, spec.train.data_path)
    batches = fixed_batches(corpus.val, spec.model.n_ctx, spec.train.batch_size, spec.train.eval_batches)
    return levels(corpus.train, batches, corpus.vocab_size)


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


def write_results(path: Path, results: dict[str, Any]) -> None:
    from training.trainer import write_json

    results = {**results, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    write_json(path, _json_safe(results))


def _json_safe(obj: Any) -> Any:
    """Non-finite floats become strings ("inf", "-inf", "nan") so the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def base_parser(prog: str, description: str, default_out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-quick", help=f"one of {', '.join(PRESETS)} (default: cpu-quick)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: 1337)")
    p.add_argument("--out", default=default_out, help=f"experiment directory (default: {default_out})")
    p.add_argument("--data", help="corpus file or prepared directory (default: $RESIDUAL_DATA_DIR, cache, download)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any preset field for every run (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def refuse_overrides(spec: RunSpec, fields: dict[str, str]) -> None:
    """Fields an experiment sets per variant cannot come from --set: field -> the option to use instead."""
    for name, instead in fields.items():
        if name in spec.overrides:
            raise ToolkitError(f"--set {name}=... would be overridden by this experiment's variants; use {instead}")


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    if text is None:
        return default
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ToolkitError(f"--seeds expects comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ToolkitError(f"--seeds needs distinct non-negative integers, got {text!r}")
    return seeds


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    overrides = parse_overrides(args.set)
    if args.data:
        overrides["data_path"] = args.data
    return resolve(args.preset, overrides)


def cli(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap an experiment's main: a ToolkitError is one `error:` line and exit 2."""

    def wrapped(argv: list[str] | None = None) -> int:
        start = time.perf_counter()
        try:
            return main(argv)
        except ToolkitError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\ninterrupted after {time.perf_counter() - start:.0f}s; run the same command again to resume",
                  file=sys.stderr)
            return 130

    return wrapped
