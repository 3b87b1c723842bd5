"""python -m benchmarks.step: ResidualGPT's training step side by side with a bare nanoGPT-style step.

    python -m benchmarks.step                          # cpu-quick and paper-10m, 2 threads
    python -m benchmarks.step --shapes smoke --json    # the tiny shape CI runs
    python -m benchmarks.step --compile                # adds torch.compile: time, speed-up, checks

One process builds, per shape, a reference GPT in nanoGPT's structure
(benchmarks/reference.py) and ResidualGPT variants of the same shape, and
times their training steps (forward, backward, clip, AdamW) in alternating
rounds, warm-up excluded, so all share the machine's noise. Ratios are paired
per round (variant's round median / reference's round median), then the
median over rounds: more robust than the absolute ms on a shared machine.
Contention only ever slows a step, so the ratio of the fastest steps
(ratio_min) is shown beside it.
MFU is against a large-matmul peak measured in the same run, at its start and
end (the higher is used).

Then Trainer.run() trains the preset (probes at their default intervals)
with a reference step interleaved after every few steps (a callback, outside
the trainer's step timing): its steady-state step (per logging window of
metrics.jsonl, first window excluded, gradient probe steps included) and its
whole run per step (wall time, less the interleaved steps: evaluation,
probes, checkpoints and logging included) as ratios to those reference steps.
The trainer's evaluation, activation probes, gradient probe and checkpoint
writes are also timed one by one in this process and counted at the preset's
intervals, to show where the whole run's extra time goes.

Peak resident memory (VmHWM) comes from child processes, one per measurement,
so each is that of its own process: after imports, after two bare reference
steps, after two bare ResidualGPT steps, and over `python -m training`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from interp.command.cli import Parser
from interp.command.signals import interrupt_code, interrupt_line, interrupts, signal_name
from interp.errors import ToolkitError, one_line

# torch and the benchmark's modules are imported inside main(), once interrupts() is in place, so a
# SIGTERM that arrives while torch loads (seconds on a busy machine) is handled like any other.


def measure_peak() -> float:
    """The matmul peak, measured now (the trainer keeps the figure for its own MFU)."""
    import torch

    from training.flops import peak_matmul_flops

    return peak_matmul_flops(torch.device("cpu"), remeasure=True)


def bench_shape(shape, args) -> dict[str, Any]:
    from benchmarks.children import measure_memory, measure_trainer_command
    from benchmarks.shapes import BenchError
    from benchmarks.timing import compile_checks, component_costs, measure_trainer, time_variants
    from benchmarks.variants import variants_for

    variants = variants_for(args.compile)
    if args.variants is not None:
        wanted = variant_names(args.variants)
        unknown = set(wanted) - {v.name for v in variants}
        if unknown:
            raise BenchError(f"unknown variant(s) {sorted(unknown)}; variants: {', '.join(v.name for v in variants)}")
        variants = [v for v in variants if v.name in wanted or v.name == "reference"]
    _progress(args, f"{shape.name}: {len(variants)} variants x {shape.rounds} rounds x {shape.steps} steps")
    result: dict[str, Any] = {
        "shape": {**shape.model.to_dict(), "batch_size": shape.batch_size},
        "describe": shape.describe(),
        "tokens_per_step": shape.tokens_per_step,
        "steps": shape.steps,
        "rounds": shape.rounds,
        "warmup": shape.warmup,
        "variants": time_variants(shape, variants),
    }
    if args.compile:
        _progress(args, f"{shape.name}: compile checks")
        eager = result["variants"]["full"]
        compiled = result["variants"]["full/compiled"]
        result["compile"] = {
            "compile_s": compiled["first_step_s"] - eager["first_step_s"],
            "speedup": eager["ms_per_step"] / compiled["ms_per_step"],
            **compile_checks(shape),
        }
    ref = result["variants"]["reference"]["ms_per_step"]
    if not args.no_trainer and shape.name in args.trainer.split(","):
        _progress(args, f"{shape.name}: the trainer's evaluation, probes and checkpoints, one by one")
        costs = component_costs(shape, args.trainer_steps)
        for c in costs.values():
            c["ratio_to_reference"] = c["ms_per_step"] / ref
        result["costs"] = costs
    if not args.no_trainer and shape.name in args.trainer.split(","):
        _progress(args, f"{shape.name}: Trainer.run() with interleaved reference steps")
        result["trainer"] = measure_trainer(shape, args.trainer_steps)
    if not args.no_memory and shape.name in args.memory.split(","):
        _progress(args, f"{shape.name}: peak memory")
        result["memory"] = measure_memory(shape, args.threads)
        if shape.name in args.trainer.split(","):
            _progress(args, f"{shape.name}: python -m training in a child, for its memory")
            result["memory"].update(measure_trainer_command(shape, args.threads, args.trainer_steps))
    return result


def _progress(args, text: str) -> None:
    if args.json:
        print(text, file=sys.stderr, flush=True)


def step_parser() -> argparse.ArgumentParser:
    from benchmarks.shapes import DEFAULT_SHAPES, SHAPE_DEFAULTS
    from benchmarks.variants import variants_for
    from training.presets import PRESETS

    p = Parser(
        prog="python -m benchmarks.step",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="variants: reference, "
        + ", ".join(v.name for v in variants_for(True)[1:])
        + "\nshapes (from training/presets.py): "
        + ", ".join(
            f"{n} ({PRESETS[n]['model']['n_layers']}L d{PRESETS[n]['model']['d_model']}; smoke is the tiny one CI runs)"
            if n == "smoke"
            else n
            for n in SHAPE_DEFAULTS
        ),
    )
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated shapes (default: {DEFAULT_SHAPES})")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads, children too (default: 2)")
    p.add_argument(
        "--steps",
        type=int,
        help="timed steps per variant per round (default per shape: "
        + ", ".join(f"{k} {v[0]}" for k, v in SHAPE_DEFAULTS.items())
        + ")",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="alternating rounds (default per shape: "
        + ", ".join(f"{k} {v[1]}" for k, v in SHAPE_DEFAULTS.items())
        + ")",
    )
    p.add_argument("--variants", help="comma-separated subset of variants (the reference is always timed)")
    p.add_argument("--compile", action="store_true", help="add torch.compile: compile time, speed-up, checks")
    p.add_argument(
        "--trainer",
        default="smoke,cpu-quick",
        help="shapes whose trainer run is measured (default: smoke,cpu-quick; paper-10m takes hours)",
    )
    p.add_argument("--trainer-steps", type=int, help="max_steps of the trainer run (default: the preset's)")
    p.add_argument("--no-trainer", action="store_true", help="skip the trainer run")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset field for every shape, as `python -m training --set` does "
        "(e.g. eval_from=0 to price the first half's evaluations); repeatable",
    )
    p.add_argument("--memory", default="smoke,cpu-quick,paper-10m", help="shapes whose peak memory is measured")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--json", action="store_true", help="print the results as JSON (progress goes to stderr)")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    p.add_argument("--training-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("training_args", nargs="*", help=argparse.SUPPRESS)
    return p


def variant_names(text: str) -> list[str]:
    """--variants: names, each once, none empty (the reference is always timed)."""
    from benchmarks.shapes import BenchError

    names = [n.strip() for n in text.split(",")]
    if any(not n for n in names):
        raise BenchError(f"--variants {text!r} has an empty entry; name one or more variants (see --help)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BenchError(f"--variants names {', '.join(repeated)} more than once; name each variant once")
    return names


def shape_names(option: str, text: str, allow_empty: bool = False) -> list[str]:
    """A comma-separated list of known shapes, each once; an empty entry or list is an error (an empty
    --trainer / --memory means none)."""
    from benchmarks.shapes import SHAPE_DEFAULTS, BenchError

    names = [n.strip() for n in text.split(",")] if text.strip() or not allow_empty else []
    if any(not n for n in names) or (not names and not allow_empty):
        raise BenchError(f"{option} {text!r} has an empty entry; name one or more of: {', '.join(SHAPE_DEFAULTS)}")
    unknown = [n for n in names if n not in SHAPE_DEFAULTS]
    if unknown:
        where = "" if option == "--shapes" else f"{option}: "
        raise BenchError(f"{where}unknown shape {unknown[0]!r}; shapes: {', '.join(SHAPE_DEFAULTS)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BenchError(f"{option} names {', '.join(repeated)} more than once; name each shape once")
    return names


def main(argv: list[str] | None = None) -> int:
    try:
        with interrupts():  # SIGTERM like Ctrl-C, from before torch is imported
            return _main(argv)
    except (KeyboardInterrupt, Exception) as e:  # Ctrl-C or SIGTERM (command.signals): only stdout written
        code = interrupt_code(e)
        if code is None:  # no signal: a bug, shown as one
            raise
        print(interrupt_line(f"interrupted ({signal_name(code)}); no report was printed"), file=sys.stderr)
        return code


def _main(argv: list[str] | None = None) -> int:
    try:
        args = step_parser().parse_args(argv)
    except ToolkitError as e:  # interp.command.cli.Parser: one line, not argparse's usage block
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    from benchmarks.children import RSS_MARK, memory_child, peak_rss_mb

    if args.training_child:  # python -m training ARGS, then this process's peak memory
        from training.__main__ import main as train_main

        rc = train_main(args.training_args)
        print(f"{RSS_MARK}{peak_rss_mb()}")
        return rc
    import torch

    from benchmarks.report import print_report
    from benchmarks.shapes import BenchError, make_shape
    from training.presets import parse_overrides

    try:
        if args.threads <= 0 or any(v is not None and v <= 0 for v in (args.steps, args.rounds, args.trainer_steps)):
            raise BenchError("--threads, --steps, --rounds and --trainer-steps must be positive")
        torch.set_num_threads(args.threads)
        names = shape_names("--shapes", args.shapes)
        for option, value in (("--trainer", args.trainer), ("--memory", args.memory)):
            shape_names(option, value, allow_empty=True)
        if args.variants is not None:
            variant_names(args.variants)
        shapes = [make_shape(n, args.steps, args.rounds, args.set) for n in names]
        from training.budget import check_runnable

        for shape in shapes:  # a size that cannot fit is refused with its estimate, before any work
            check_runnable(shape.model, shape.train, "cpu")
        if args.memory_child:
            memory_child(args.memory_child, shapes[0].name, args.set)
            print(f"{RSS_MARK}{peak_rss_mb()}")
            return 0
        report: dict[str, Any] = {
            "machine": {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "cpu_count": os.cpu_count(),
                "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                "peak_start": measure_peak(),
            },
            "overrides": parse_overrides(args.set),
            "shapes": {},
        }
        for shape in shapes:
            report["shapes"][shape.name] = bench_shape(shape, args)
        m = report["machine"]
        m["peak_end"] = measure_peak()
        m["peak_matmul_flops"] = max(m["peak_start"], m["peak_end"])
        m["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        for s in report["shapes"].values():
            for v in s["variants"].values():
                v["mfu"] = v["flops_per_step"] / (v["ms_per_step"] / 1e3) / m["peak_matmul_flops"]
    except ToolkitError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    from interp.command.cli import guarded_output

    raise SystemExit(guarded_output(main))
