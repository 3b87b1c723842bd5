"""python -m benchmarks.gpu_step: the training step on a GPU beside the nanoGPT-structured reference, with MFU.

    python -m benchmarks.gpu_step                          # paper-10m on CUDA, every mode, about 2 min on an H200
    python -m benchmarks.gpu_step --device cpu --shape smoke --budget-s 20   # the tiny CPU shape of the dry run

One process builds the reference GPT (benchmarks/reference.py) and ResidualGPT (full, attn_only) at one
preset's shape and times their training steps (forward, backward, clip, AdamW) in alternating rounds, warm-up
excluded, so all share the machine's state; a round is `--steps` steps between two device synchronisations,
and each model's figure is the median round. Modes (--modes):

    fp32-det        float32, TF32 off, deterministic algorithms: the paper-10m preset on CUDA before issue 49
    tf32-det        float32 with TF32 matmuls, deterministic
    bf16-det        bf16 autocast, deterministic (the trainer's deterministic=true)
    bf16            bf16 autocast, deterministic off
    bf16-compiled   torch.compile (default mode) of each model, bf16, deterministic off
    bf16-graphs     torch.compile mode="reduce-overhead" (CUDA graphs), bf16, deterministic off
    fp32 / fp32-compiled   float32 with deterministic off, eager or compiled (the CPU's modes)

and first, with --ensemble K, K members of the shape as one stacked step (training.stacked: StackedGPT and
StackedAdamW, per-member clipping vectorised), bf16 on CUDA. ResidualGPT and each member draw their dropout masks
from a run's own stream (interp.model.dropout), moved on every step, as the trainer's step does: the step timed is the
one training runs (with torch.compile each dropout site is a graph break), not a faster one it never runs; the
reference draws from torch's generator, as nanoGPT does. MFU is the estimated training FLOPs
(training.flops.flops_per_token) over the large-matmul peak of the mode's precision measured in this run, and,
on CUDA, over the measured bf16 peak for every row: issue 49's yardstick (targets: a paper-10m solo step <= 5
ms; an 8-member ensemble >= 40% of the bf16 peak). A mode past --budget-s is skipped and named, never guessed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS reads it when CUDA starts

from interp.command.cli import DocParser, command_main  # noqa: E402
from interp.errors import ToolkitError, one_line  # noqa: E402

SOLO_TARGET_MS = 5.0  # issue 49 part 3: a paper-10m solo step on one H200
ENSEMBLE_TARGET_MFU = 0.40  # an 8-member paper-10m ensemble, of the measured bf16 peak


@dataclass(frozen=True)
class StepMode:
    """One way of taking the step: precision (fp32, tf32, bf16 autocast), determinism, torch.compile's mode."""

    name: str
    precision: str
    deterministic: bool
    compile_mode: str | None = None
    note: str = ""


MODES = {
    m.name: m
    for m in (
        StepMode("fp32-det", "fp32", True, note="float32, TF32 off, deterministic"),
        StepMode("tf32-det", "tf32", True, note="TF32 matmuls, deterministic"),
        StepMode("bf16-det", "bf16", True, note="bf16 autocast, deterministic"),
        StepMode("bf16", "bf16", False, note="bf16 autocast"),
        StepMode("bf16-compiled", "bf16", False, "default", note="bf16, torch.compile"),
        StepMode("bf16-graphs", "bf16", False, "reduce-overhead", note="bf16, CUDA graphs (reduce-overhead)"),
        StepMode("fp32", "fp32", False, note="float32"),
        StepMode("fp32-compiled", "fp32", False, "default", note="float32, torch.compile"),
    )
}
# Most telling first: a mode past the budget is skipped, and the float32 ones are known from the H200 logs.
DEFAULT_MODES = {"cuda": "bf16-det,bf16,bf16-graphs,bf16-compiled,tf32-det,fp32-det", "cpu": "fp32-det,fp32"}
EAGER_MODELS = ("reference", "full", "attn_only")
COMPILED_MODELS = ("reference", "full")  # compiling costs 10-20 s a model on an H200: two, side by side
COMPILE_RESERVE_S = 40.0  # a compiled mode is started only with this much of the budget left


class GpuStepError(ToolkitError):
    """The GPU step benchmark cannot run as asked (no CUDA, an unknown mode)."""


def gpu_step_parser() -> argparse.ArgumentParser:
    p = DocParser(prog="python -m benchmarks.gpu_step", description=__doc__.split("\n\n", 2)[2])
    p.add_argument("--shape", default="paper-10m", help="the preset whose shape is timed (default paper-10m)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (default) or cpu")
    p.add_argument("--modes", help=f"comma list of {', '.join(MODES)} (default on cuda: {DEFAULT_MODES['cuda']})")
    p.add_argument("--ensemble", type=int, default=None, metavar="K", help="members of the stacked step (cuda: 8)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (cuda 20, cpu 2)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (cuda 5, cpu 2)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per model, compilation included (5, 1)")
    p.add_argument("--budget-s", type=float, default=150.0, help="modes past this many seconds are skipped")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (default inductor)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset field")
    p.add_argument("--json-out", help="also write the results as JSON to this file")
    return p


@contextlib.contextmanager
def _mode_state(mode: StepMode):
    """TF32 and deterministic algorithms as the mode says, restored after."""
    import torch

    from training.numerics import process_settings

    with process_settings():
        torch.backends.cuda.matmul.allow_tf32 = mode.precision == "tf32"
        torch.use_deterministic_algorithms(mode.deterministic)
        yield


def _autocast(mode: StepMode, device):
    from training.numerics import autocast_context

    return autocast_context("bfloat16" if mode.precision == "bf16" else "float32", device)


def measure_peaks(device) -> dict[str, float]:
    """FLOP/s of a large matmul per precision, measured now (bf16, TF32 and fp32 on CUDA; fp32 on a CPU)."""
    import torch

    from training.flops import peak_matmul_flops

    if device.type != "cuda":
        return {"fp32": peak_matmul_flops(device, torch.float32, remeasure=True)}
    peaks = {"bf16": peak_matmul_flops(device, torch.bfloat16, remeasure=True)}
    for name in ("tf32", "fp32"):
        with _mode_state(StepMode(name, name, False)):  # TF32 on for "tf32" only
            peaks[name] = peak_matmul_flops(device, torch.float32, remeasure=True)
    return peaks


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build(kind: str, spec, device, mode: StepMode, backend: str):
    """(model as built, the callable that steps it, its optimizer), seeded alike for every model."""
    import torch

    from benchmarks.reference import RefGPT
    from interp.model.dropout import DropoutStream
    from interp.model.gpt import ResidualGPT
    from training.optimizer import make_optimizer

    torch.manual_seed(0)
    model = RefGPT(spec.model) if kind == "reference" else ResidualGPT(spec.model.replace(residual=kind))
    model = model.to(device).train()
    if kind != "reference":
        model.set_dropout_stream(DropoutStream(0))
    opt = make_optimizer(model, spec.train, device)
    call = model
    if mode.compile_mode:
        kwargs = {"mode": mode.compile_mode} if backend == "inductor" else {}
        call = torch.compile(model, backend=backend, **kwargs)
    return model, call, opt


def _solo_step(entry, batch, autocast, clip: float) -> None:
    import torch

    model, call, opt = entry
    _advance([getattr(model, "dropout_stream", None)])
    with autocast:
        _, loss = call(*batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _advance(streams) -> None:
    """Each dropout stream to its next micro-step, as the trainer moves it (the reference has none)."""
    for stream in streams:
        if stream is not None:
            stream.at(stream.counter + 1)


def _rounds(steppers: dict[str, Any], batches, device, steps: int, rounds: int, warmup: int) -> dict[str, Any]:
    """Each stepper's first step (compilation included) and median round, in alternating rounds."""
    first, per_round = {}, {name: [] for name in steppers}
    for name, step in steppers.items():
        _sync(device)
        t0 = time.perf_counter()
        for i in range(warmup):
            step(batches[i % len(batches)])
            if i == 0:
                _sync(device)
                first[name] = time.perf_counter() - t0
        _sync(device)
    names = list(steppers)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            _sync(device)
            t0 = time.perf_counter()
            for i in range(steps):
                steppers[name](batches[i % len(batches)])
            _sync(device)
            per_round[name].append((time.perf_counter() - t0) / steps)
    return {n: {"ms": 1e3 * statistics.median(v), "first_step_s": first[n]} for n, v in per_round.items()}


def _step_flops(n_params: int, cfg, tokens: int) -> float:
    from training.flops import flops_per_token

    return flops_per_token(cfg, n_params) * tokens


def time_mode(mode: StepMode, spec, device, batches, timing: dict[str, int], backend: str) -> list[dict[str, Any]]:
    """The reference and ResidualGPT under one mode, side by side: one row per model."""
    clip = spec.train.grad_clip or float("inf")
    kinds = COMPILED_MODELS if mode.compile_mode else EAGER_MODELS
    autocast = _autocast(mode, device)
    with _mode_state(mode):
        built = {k: _build(k, spec, device, mode, backend) for k in kinds}
        steppers = {k: (lambda b, e=e: _solo_step(e, b, autocast, clip)) for k, e in built.items()}
        times = _rounds(steppers, batches, device, timing["steps"], timing["rounds"], timing["warmup"])
    tokens = batches[0][0].numel()
    ref = times["reference"]["ms"]
    return [
        {
            "mode": mode.name,
            "model": k,
            "ms": t["ms"],
            "ratio_to_reference": t["ms"] / ref,
            "first_step_s": t["first_step_s"],
            "flops": _step_flops(sum(p.numel() for p in built[k][0].parameters()), spec.model, tokens),
            "precision": mode.precision,
            "note": mode.note,
        }
        for k, t in times.items()
    ]


def _stacked_step(stacked, opt, lr, wd, batch, autocast, clip: float) -> None:
    import torch

    _advance(slot.stream for slot in stacked._slots)
    with autocast:
        losses = stacked(*batch)
    losses.sum().backward()
    grads = [stacked.p(n).grad for n in stacked.names]
    norms = torch.linalg.vector_norm(torch.stack([g.flatten(1).norm(dim=1) for g in grads]), dim=0)
    coef = torch.clamp(clip / (norms + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(coef.view((-1,) + (1,) * (g.dim() - 1)))
    opt.step(lr, wd)
    for n in stacked.names:
        stacked.p(n).grad = None


def _stacked(cfg, k: int, device):
    """A StackedGPT of k members of cfg, or the reason today's stacked step refuses it."""
    import torch

    from interp.model.dropout import DropoutStream
    from interp.model.gpt import ResidualGPT
    from training.stacked import StackedGPT

    torch.manual_seed(0)
    members = [ResidualGPT(cfg) for _ in range(k)]
    for seed, m in enumerate(members):
        m.set_dropout_stream(DropoutStream(seed))
    try:
        return StackedGPT(members).to(device).train(), None
    except ToolkitError as e:
        return None, one_line(e)


def time_ensemble(k: int, spec, device, batches, timing: dict[str, int], mode: StepMode) -> dict[str, Any]:
    """k members as one stacked step; where the shape is refused (dropout, before issue 49 part 1), the same
    shape with dropout 0 instead, and the refusal named."""
    import torch

    from training.stacked import StackedAdamW

    cfg, refused = spec.model, None
    stacked, why = _stacked(cfg, k, device)
    if stacked is None:
        refused, cfg = why, cfg.replace(dropout=0.0)
        stacked, why = _stacked(cfg, k, device)
        if stacked is None:
            return {"k": k, "refused": refused or why}
    names = stacked.names
    betas = (spec.train.beta1, spec.train.beta2)
    opt = StackedAdamW({n: stacked.p(n) for n in names}, {n: stacked.p(n).dim() >= 3 for n in names}, betas)
    lr = torch.full((k,), spec.train.lr, device=device)
    wd = torch.full((k,), spec.train.weight_decay, device=device)
    stacks = [
        tuple(torch.stack([batches[(i + m) % len(batches)][j] for m in range(k)]) for j in (0, 1))
        for i in range(len(batches))
    ]
    autocast, clip = _autocast(mode, device), spec.train.grad_clip or float("inf")
    with _mode_state(mode):
        step = lambda b: _stacked_step(stacked, opt, lr, wd, b, autocast, clip)  # noqa: E731
        t = _rounds({"ensemble": step}, stacks, device, timing["steps"], timing["rounds"], timing["warmup"])
    n_params = sum(stacked.p(n)[0].numel() for n in names)
    return {
        "k": k,
        "mode": mode.name,
        "ms": t["ensemble"]["ms"],
        "ms_per_member": t["ensemble"]["ms"] / k,
        "flops": k * _step_flops(n_params, cfg, batches[0][0].numel()),
        "dropout": cfg.dropout,
        "refused": refused,
    }


def _mode_names(text: str | None, device_type: str) -> list[StepMode]:
    names = [n.strip() for n in (text or DEFAULT_MODES[device_type]).split(",")]
    unknown = [n for n in names if n not in MODES]
    if unknown or not names or len(set(names)) != len(names):
        raise GpuStepError(f"--modes {text!r}: name each of {', '.join(MODES)} at most once")
    if device_type != "cuda" and any(MODES[n].precision == "tf32" for n in names):
        raise GpuStepError("--modes: TF32 is a CUDA precision; on a CPU time fp32 or bf16 modes")
    return [MODES[n] for n in names]


def _timing(args, device_type: str) -> dict[str, int]:
    cuda = device_type == "cuda"
    given = {"steps": args.steps, "rounds": args.rounds, "warmup": args.warmup}
    defaults = {"steps": 20 if cuda else 2, "rounds": 5 if cuda else 2, "warmup": 5 if cuda else 1}
    timing = {k: defaults[k] if v is None else v for k, v in given.items()}  # a given 0 is refused, not defaulted
    budget_ok = math.isfinite(args.budget_s) and args.budget_s > 0
    if min(timing.values()) < 1 or (args.ensemble is not None and args.ensemble < 0) or not budget_ok:
        raise GpuStepError("--steps, --rounds, --warmup and --budget-s must be positive, --ensemble >= 0")
    return timing


def _with_mfu(row: dict[str, Any], peaks: dict[str, float], precision: str) -> dict[str, Any]:
    seconds = row["ms"] / 1e3
    row["mfu"] = row["flops"] / seconds / peaks[precision] if precision in peaks else None
    row["mfu_bf16_peak"] = row["flops"] / seconds / peaks["bf16"] if "bf16" in peaks else None
    return row


def run_gpu_step(args, save=lambda report: None) -> dict[str, Any]:
    """The measurements as one dict (what --json-out writes and the report prints); save(report) after each
    mode, so a run stopped at a budget outside it leaves what it measured."""
    import torch

    from benchmarks.shapes import fixed_token_batches, make_shape
    from training.presets import parse_overrides, resolve

    start = time.perf_counter()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise GpuStepError(f"no CUDA device (torch {torch.__version__} sees none); --device cpu times the CPU")
    device = torch.device(args.device)
    modes, timing = _mode_names(args.modes, device.type), _timing(args, device.type)
    if any(m.compile_mode for m in modes):
        _check_backend(args.compile_backend)
    shape = make_shape(args.shape, None, None, args.set)
    batches = [(x.to(device), y.to(device)) for x, y in fixed_token_batches(shape)]
    spec = resolve(args.shape, parse_overrides(args.set))
    peaks = measure_peaks(device)
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)",
        "shape": args.shape,
        "describe": shape.describe(),
        "timing": timing,
        "peaks": peaks,
        "rows": [],
        "skipped": [],
        "targets": {"solo_ms": SOLO_TARGET_MS, "ensemble_mfu_bf16": ENSEMBLE_TARGET_MFU},
    }
    k = args.ensemble if args.ensemble is not None else (8 if device.type == "cuda" else 0)
    if k:  # first: issue 49's ensemble target, and no compilation to wait for
        out["ensemble"] = _ensemble_row(k, spec, device, batches, timing, peaks, args.budget_s)
        save(out)
    for mode in modes:
        left = args.budget_s - (time.perf_counter() - start)
        if left <= 0 or (mode.compile_mode and left < COMPILE_RESERVE_S):
            out["skipped"].append(f"{mode.name} (budget: {left:.0f} s left)")
            continue
        try:
            rows = time_mode(mode, spec, device, batches, timing, args.compile_backend)
        except Exception as e:  # noqa: BLE001 - a mode that fails (a compiler missing) is named, the rest still run
            out["skipped"].append(f"{mode.name} (failed: {type(e).__name__}: {one_line(e)[:200]})")
            continue
        out["rows"] += [_with_mfu(r, peaks, mode.precision) for r in rows]
        save(out)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out["wall_s"] = time.perf_counter() - start
    save(out)
    return out


def _check_backend(name: str) -> None:
    """An unknown --compile-backend is one line here, not a compiled mode skipped as 'failed' with exit 0."""
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if name not in known:
        raise GpuStepError(f"--compile-backend {name!r}: torch.compile knows {', '.join(known)}")


def _ensemble_row(k, spec, device, batches, timing, peaks, left: float) -> dict[str, Any]:
    mode = MODES["bf16"] if device.type == "cuda" else MODES["fp32"]
    if left <= 0:
        return {"k": k, "skipped": f"budget: {left:.0f} s left"}
    try:
        row = time_ensemble(k, spec, device, batches, timing, mode)
    except Exception as e:  # noqa: BLE001 - today's stacked step may not take this shape: named, not guessed
        return {"k": k, "failed": f"{type(e).__name__}: {one_line(e)[:200]}"}
    return _with_mfu(row, peaks, mode.precision) if "ms" in row else row


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_gpu_step(report: dict[str, Any]) -> None:
    peaks = ", ".join(f"{k} {v / 1e12:.1f}" for k, v in report["peaks"].items())
    print(f"{report['device']}, torch {report['torch']}; measured matmul peak TFLOP/s: {peaks}")
    t = report["timing"]
    print(
        f"{report['shape']}: {report['describe']}; {t['rounds']} rounds x {t['steps']} steps (+{t['warmup']} warm-up)"
    )
    print(
        f"  {'mode':14s} {'model':10s} {'ms/step':>8s} {'vs ref':>7s} {'MFU':>6s} {'of bf16':>7s} {'1st s':>6s}  note"
    )
    for r in report["rows"]:
        print(
            f"  {r['mode']:14s} {r['model']:10s} {r['ms']:8.2f} {r['ratio_to_reference']:6.2f}x {_pct(r['mfu']):>6s} "
            f"{_pct(r['mfu_bf16_peak']):>7s} {r['first_step_s']:6.1f}  {r['note']}"
        )
    e = report.get("ensemble")
    if e and "ms" in e:
        note = f"; dropout {e['dropout']:g} (the preset's refused: {e['refused']})" if e["refused"] else ""
        print(
            f"  ensemble of {e['k']} ({e['mode']}): {e['ms']:.2f} ms a step, {e['ms_per_member']:.2f} ms a member, "
            f"MFU {_pct(e['mfu'])}, of the bf16 peak {_pct(e['mfu_bf16_peak'])}{note}"
        )
    elif e:
        print(f"  ensemble of {e['k']}: not measured ({e.get('refused') or e.get('skipped') or e.get('failed')})")
    for s in report["skipped"]:
        print(f"  skipped: {s}")


def _save(path: str | None, report: dict[str, Any]) -> None:
    if path:
        from interp.files.io import write_json

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(path), report)


def main(argv: list[str] | None = None) -> int:
    return command_main(lambda: _main(argv), "no report was printed")  # Ctrl-C or SIGTERM: only stdout written


def _main(argv: list[str] | None) -> int:
    args = gpu_step_parser().parse_args(argv)
    print_gpu_step(run_gpu_step(args, lambda report: _save(args.json_out, report)))
    return 0


if __name__ == "__main__":
    from interp.command.cli import guarded_output

    raise SystemExit(guarded_output(main))
