"""python -m benchmarks.ensemble_speed: K solo training steps against one stacked step of K members, side by side.

    python -m benchmarks.ensemble_speed                                   # phase-cell x16 and x8, cpu-quick x8
    python -m benchmarks.ensemble_speed --cases phase-cell:16 --whole     # and whole runs, solo against ensemble
    python -m benchmarks.ensemble_speed --cases smoke:4 --rounds 3 --json

Per case, K member runs of the preset (ffn_only and attn_only alternating, seeds 1..K) are set up as the
trainer sets them up, then timed in alternating rounds in one process: K solo Trainer steps (forward,
backward, clip, AdamW, each member in turn) and one ensemble step that advances all K (training.steps).
Each round's median per step is paired, so both share the machine's noise; the speed-up is the median
of the paired ratios, with the ratio of the fastest rounds beside it. Achieved GFLOP/s counts the
trainer's estimate (6N + attention per token) over the member-steps done, against a large-matmul peak
measured at the start and end of the run (the higher is shown). --whole also trains the K runs to the
end both ways (evaluation, probes, checkpoints and logging included) and reports the wall times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from interp.command.cli import Parser
from interp.command.signals import interrupts
from interp.errors import ToolkitError, one_line


def parse_cases(text: str) -> list[tuple[str, int]]:
    from training.presets import PRESETS

    cases = []
    for item in text.split(","):
        preset, _, k = item.strip().partition(":")
        if preset not in PRESETS:
            raise ToolkitError(f"--cases: unknown preset {preset!r} (one of {', '.join(PRESETS)})")
        try:
            members = int(k)
        except ValueError:
            raise ToolkitError(f"--cases expects PRESET:K, got {item!r}") from None
        if members < 1:
            raise ToolkitError(f"--cases: K must be >= 1, got {members}")
        cases.append((preset, members))
    return cases


def members(preset: str, k: int, out: Path, overrides: dict[str, Any] | None = None) -> list:
    from probes import default_callbacks
    from training.data import load_corpus
    from training.presets import resolve
    from training.rundir import RunDir
    from training.trainer import Trainer

    trainers = []
    corpus = None
    for i in range(k):
        residual = ("ffn_only", "attn_only")[i % 2]
        spec = resolve(preset, {"residual": residual, "seed": i + 1, **(overrides or {})})
        corpus = corpus or load_corpus(spec.train.corpus, spec.train.data_path)
        spec = spec.fit_vocab(corpus.vocab_size)
        t = Trainer(spec.model, spec.train, RunDir(out / f"{residual}-seed{i + 1}"), corpus=corpus, progress=False)
        t.callbacks.extend(default_callbacks(spec.train))
        trainers.append(t)
    return trainers


def time_steps(preset: str, k: int, rounds: int, steps: int) -> dict[str, Any]:
    import torch

    from training.flops import flops_per_token
    from training.steps import SoloStep, StackedStep

    with tempfile.TemporaryDirectory() as tmp:
        solo = members(preset, k, Path(tmp) / "solo")
        ens = members(preset, k, Path(tmp) / "ens")
        for t in solo + ens:
            t.setup()
            t.resume_or_start()
            t.rng = torch.get_rng_state()
        solo_steps = [SoloStep(t) for t in solo]
        stacked = StackedStep(ens)
        solo_ms, ens_ms = [], []
        step = 0
        for r in range(rounds + 1):  # round 0 warms up
            a = []
            for _ in range(steps):
                t0 = time.perf_counter()
                for one in solo_steps:
                    one.train(step)
                a.append(time.perf_counter() - t0)
                step += 1
            b = []
            for _ in range(steps):
                t0 = time.perf_counter()
                stacked.at(step)
                stacked.train(step)
                b.append(time.perf_counter() - t0)
            if r:
                solo_ms.append(1e3 * statistics.median(a))
                ens_ms.append(1e3 * statistics.median(b))
        t = ens[0]
        flops = flops_per_token(t.model_cfg, t.model.num_params()) * t.train_cfg.batch_size * t.model_cfg.n_ctx * k
    ratios = [s / e for s, e in zip(solo_ms, ens_ms, strict=True)]
    return {
        "preset": preset,
        "members": k,
        "rounds": rounds,
        "steps_per_round": steps,
        "solo_ms_per_k_steps": statistics.median(solo_ms),
        "ensemble_ms_per_step": statistics.median(ens_ms),
        "speedup": statistics.median(ratios),
        "speedup_fastest": min(solo_ms) / min(ens_ms),
        "solo_gflops": flops / statistics.median(solo_ms) / 1e6,
        "ensemble_gflops": flops / statistics.median(ens_ms) / 1e6,
    }


def time_whole(preset: str, k: int) -> dict[str, Any]:
    from training.ensemble import EnsembleTrainer

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for t in members(preset, k, Path(tmp) / "solo"):
            t.run()
        solo = time.perf_counter() - t0
        t0 = time.perf_counter()
        EnsembleTrainer(members(preset, k, Path(tmp) / "ens"), progress=False).run()
        ens = time.perf_counter() - t0
    return {"solo_whole_s": solo, "ensemble_whole_s": ens, "whole_speedup": solo / ens}


def main(argv: list[str] | None = None) -> int:
    p = Parser(
        prog="python -m benchmarks.ensemble_speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--cases",
        default="phase-cell:16,phase-cell:8,cpu-quick:8",
        help="PRESET:K,... (default phase-cell:16,phase-cell:8,cpu-quick:8)",
    )
    p.add_argument("--rounds", type=int, default=5, help="timed rounds after one warm-up round (default 5)")
    p.add_argument("--steps", type=int, default=5, help="steps per round and side (default 5)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    p.add_argument("--whole", action="store_true", help="also train the K runs to the end, solo and as one ensemble")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    with interrupts():
        try:
            args = p.parse_args(argv)
            if args.rounds < 1 or args.steps < 1 or args.threads < 0:
                raise ToolkitError("--rounds and --steps must be >= 1, --threads >= 0")
            cases = parse_cases(args.cases)
            import torch

            from training.flops import peak_matmul_flops

            if args.threads:
                torch.set_num_threads(args.threads)
            peak_start = peak_matmul_flops(torch.device("cpu"), remeasure=True)
            results = []
            for preset, k in cases:
                r = time_steps(preset, k, args.rounds, args.steps)
                if args.whole:
                    r.update(time_whole(preset, k))
                results.append(r)
                if not args.json:
                    line = (
                        f"{preset} x{k}: {k} solo steps {r['solo_ms_per_k_steps']:.1f} ms "
                        f"({r['solo_gflops']:.0f} GFLOP/s), one ensemble step {r['ensemble_ms_per_step']:.1f} ms "
                        f"({r['ensemble_gflops']:.0f} GFLOP/s): {r['speedup']:.2f}x "
                        f"(fastest rounds {r['speedup_fastest']:.2f}x)"
                    )
                    if args.whole:
                        line += (
                            f"; whole runs {r['solo_whole_s']:.1f} s solo, {r['ensemble_whole_s']:.1f} s as one "
                            f"ensemble: {r['whole_speedup']:.2f}x"
                        )
                    print(line, flush=True)
            peak = max(peak_start, peak_matmul_flops(torch.device("cpu"), remeasure=True))
            summary = {"peak_matmul_gflops": peak / 1e9, "threads": torch.get_num_threads(), "cases": results}
            if args.json:
                print(json.dumps(summary, indent=2))
            else:
                print(
                    f"matmul peak {peak / 1e9:.0f} GFLOP/s ({torch.get_num_threads()} threads), measured at the "
                    "start and end of this run"
                )
        except ToolkitError as e:
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    from interp.command.cli import guarded_output

    raise SystemExit(guarded_output(main))
