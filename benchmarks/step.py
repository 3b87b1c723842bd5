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
import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.reference import RefGPT
from interp.config import ModelConfig
from interp.errors import ToolkitError, one_line
from interp.model import ResidualGPT
from interp.signals import exit_code, interrupts, signal_name
from training import trainer as trainer_module
from training.compile import maybe_compile
from training.presets import PRESETS, parse_overrides, resolve
from training.trainer import flops_per_token, make_optimizer, peak_matmul_flops, read_jsonl

# (steps per round, rounds, warm-up steps) per shape; --steps / --rounds override.
SHAPE_DEFAULTS = {"smoke": (3, 2, 1), "cpu-quick": (2, 8, 2), "paper-10m": (1, 3, 1)}
DEFAULT_SHAPES = "cpu-quick,paper-10m"
RESIDUAL_CONFIGS = ("full", "attn_only", "ffn_only", "none")


class BenchError(ToolkitError):
    """The benchmark cannot run as asked (an unknown shape or variant, a failed child run)."""


# ----- the step ----------------------------------------------------------------------------------------
def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x, y, clip: float) -> torch.Tensor:
    """One step as the trainer takes it: forward, backward, clip, AdamW, zero_grad."""
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@contextlib.contextmanager
def deterministic_mode(fill_uninitialized_memory: bool = True):
    """The trainer's default (deterministic=True): torch.use_deterministic_algorithms(True)."""
    import torch.utils.deterministic as det

    prev, prev_fill = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    det.fill_uninitialized_memory = fill_uninitialized_memory
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev)
        det.fill_uninitialized_memory = prev_fill


class _NoHook:
    """Stands in for a HookPoint: a plain call, no nn.Module machinery, never hooked."""

    fwd_hooks = bwd_hooks = _forward_hooks = ()  # what interp.mixers._hooked reads

    def __call__(self, x):
        return x


def strip_hooks(model: nn.Module) -> nn.Module:
    """Replace every HookPoint by a plain identity call: what unused hook points cost, removed."""
    from transformer_lens.hook_points import HookPoint

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, HookPoint):
                delattr(module, name)
                object.__setattr__(module, name, _NoHook())
    return model


def _no_causal_kernel(model: ResidualGPT) -> ResidualGPT:
    for block in model.blocks:
        if hasattr(block.attn, "causal_kernel"):
            block.attn.causal_kernel = False
    return model


def _unfused_layer_norm(model: ResidualGPT) -> ResidualGPT:
    """A permanent identity hook on every hook_normalized: LayerNorm takes its hooked (split) path."""
    for name in model.hook_dict:
        if name.endswith("hook_normalized"):
            model.add_hook(name, lambda x, hook: x, is_permanent=True)
    return model


def _explicit(model: ResidualGPT) -> ResidualGPT:
    model.set_explicit_attention(True)
    return model


@dataclass
class Variant:
    name: str
    build: Callable[[ModelConfig], nn.Module]
    context: Callable[[], Any] = contextlib.nullcontext
    note: str = ""


def variants_for(compile_: bool) -> list[Variant]:
    vs = [Variant("reference", RefGPT, note="nanoGPT-structured GPT, is_causal SDPA, no hooks")]
    vs += [
        Variant(r, lambda c, r=r: ResidualGPT(c.replace(residual=r)), note="attention mixer")
        for r in RESIDUAL_CONFIGS
    ]
    vs += [
        Variant(f"full+{m}", lambda c, m=m: ResidualGPT(c.replace(mixer=m)), note=f"{m} mixer")
        for m in ("uniform", "position_blind")
    ]
    vs += [
        Variant("full/masked", lambda c: _no_causal_kernel(ResidualGPT(c)), note="explicit mask (before is_causal)"),
        Variant("full/ln_split", lambda c: _unfused_layer_norm(ResidualGPT(c)),
                note="LayerNorm then a separate * w (before fusing)"),
        Variant("full/explicit", lambda c: _explicit(ResidualGPT(c)), note="explicit softmax path"),
        Variant("full/no_hooks", lambda c: strip_hooks(ResidualGPT(c)), note="hook points stripped"),
        Variant("full/deterministic", ResidualGPT, deterministic_mode, note="the trainer's deterministic mode"),
        Variant(
            "full/deterministic_nofill", ResidualGPT, lambda: deterministic_mode(False),
            note="... without filling uninitialized memory",
        ),
    ]
    if compile_:
        vs.append(Variant("full/compiled", lambda c: maybe_compile(ResidualGPT(c), True), note="torch.compile"))
    return vs


# ----- one shape, in rounds ----------------------------------------------------------------------------
@dataclass
class Shape:
    name: str
    model: ModelConfig
    batch_size: int
    grad_clip: float
    steps: int
    rounds: int
    warmup: int
    train: Any = field(repr=False, default=None)
    sets: list[str] = field(default_factory=list)  # the --set KEY=VALUE overrides, passed on to child runs

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.n_ctx

    def describe(self) -> str:
        m = self.model
        return (f"{m.n_layers}L d{m.d_model} h{m.n_heads} ctx{m.n_ctx} batch{self.batch_size} vocab{m.d_vocab} "
                f"dropout{m.dropout:g}")


def make_shape(name: str, steps: int | None, rounds: int | None, sets: list[str] | None = None) -> Shape:
    if name not in SHAPE_DEFAULTS:
        raise BenchError(f"unknown shape {name!r}; shapes: {', '.join(SHAPE_DEFAULTS)}")
    spec = resolve(name, parse_overrides(sets or []))
    d_steps, d_rounds, warmup = SHAPE_DEFAULTS[name]
    return Shape(name, spec.model, spec.train.batch_size, spec.train.grad_clip or math.inf,
                 steps or d_steps, rounds or d_rounds, warmup, spec.train, list(sets or []))


def fixed_token_batches(shape: Shape, n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    size = (shape.batch_size, shape.model.n_ctx + 1)
    windows = [torch.randint(0, shape.model.d_vocab, size, generator=gen) for _ in range(n)]
    return [(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in windows]


def time_variants(shape: Shape, variants: list[Variant], seed: int = 0) -> dict[str, dict[str, Any]]:
    batches = fixed_token_batches(shape)
    train_cfg = shape.train
    built = {}
    for v in variants:
        torch.manual_seed(seed)
        model = v.build(shape.model)
        model.train()
        built[v.name] = (model, make_optimizer(model, train_cfg, torch.device("cpu")))
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    round_medians: dict[str, list[float]] = {v.name: [] for v in variants}
    first_step: dict[str, float] = {}
    counter = 0

    def run(v: Variant, n: int) -> list[float]:
        nonlocal counter
        model, opt = built[v.name]
        out = []
        with v.context():
            for _ in range(n):
                x, y = batches[counter % len(batches)]
                counter += 1
                t0 = time.perf_counter()
                train_step(model, opt, x, y, shape.grad_clip)
                out.append(time.perf_counter() - t0)
        return out

    for v in variants:  # warm-up: allocator, kernels, compilation; not counted
        first_step[v.name] = run(v, shape.warmup)[0]
    for r in range(shape.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for v in order:
            ts = run(v, shape.steps)
            times[v.name] += ts
            round_medians[v.name].append(statistics.median(ts))
    ref = round_medians["reference"]
    results = {}
    for v in variants:
        model = built[v.name][0]
        n_params = sum(p.numel() for p in model.parameters())
        ratios = [a / b for a, b in zip(round_medians[v.name], ref, strict=True)]
        results[v.name] = {
            "ms_per_step": 1e3 * statistics.median(times[v.name]),
            "ratio": statistics.median(ratios),
            "ms_min": 1e3 * min(times[v.name]),
            "ratio_min": min(times[v.name]) / min(times["reference"]),
            "round_ratios": ratios,
            "first_step_s": first_step[v.name],
            "n_params": n_params,
            "flops_per_step": flops_per_token(shape.model, n_params) * shape.tokens_per_step,
            "note": v.note,
        }
    return results


# ----- torch.compile checks ----------------------------------------------------------------------------
def compile_checks(shape: Shape, n_steps: int = 3) -> dict[str, Any]:
    """Run-to-run bitwise losses of two compiled runs, and hooks / run_with_cache on a compiled model."""
    batches = fixed_token_batches(shape)
    losses = []
    with deterministic_mode():
        for _ in range(2):
            torch.manual_seed(0)
            model = maybe_compile(ResidualGPT(shape.model), True)
            opt = make_optimizer(model, shape.train, torch.device("cpu"))
            losses.append([train_step(model, opt, *batches[i % len(batches)], shape.grad_clip).item()
                           for i in range(n_steps)])
    torch.manual_seed(0)
    eager = ResidualGPT(shape.model).eval()
    compiled = maybe_compile(ResidualGPT(shape.model), True).eval()
    compiled.load_state_dict(eager.state_dict())
    x = batches[0][0][:2]
    with torch.no_grad():
        logits_e, cache_e = eager.run_with_cache(x)
        logits_c, cache_c = compiled.run_with_cache(x)
        ablate = [("blocks.0.hook_attn_out", lambda t, hook: torch.zeros_like(t))]
        patched_e = eager.run_with_hooks(x, fwd_hooks=ablate)
        patched_c = compiled.run_with_hooks(x, fwd_hooks=ablate)
    cache_ok = set(cache_e.keys()) == set(cache_c.keys()) and all(
        torch.allclose(cache_e[k], cache_c[k], atol=1e-4, rtol=1e-4) for k in cache_e.keys()
    )
    return {
        "bitwise_repeat": losses[0] == losses[1],
        "losses": losses,
        "run_with_cache_ok": bool(cache_ok and torch.allclose(logits_e, logits_c, atol=1e-4, rtol=1e-4)),
        "run_with_hooks_ok": bool(torch.allclose(patched_e, patched_c, atol=1e-4, rtol=1e-4)
                                  and not torch.allclose(patched_c, logits_c)),
        "state_dict_keys_unchanged": list(compiled.state_dict()) == list(eager.state_dict()),
    }


# ----- what the trainer adds around its steps ----------------------------------------------------------
def _best_of(fn: Callable[[], Any], n: int = 2) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_counts(train_cfg) -> dict[str, int]:
    """How often the trainer evaluates, probes and checkpoints in a run at these intervals."""
    from probes import default_callbacks

    n = train_cfg.max_steps
    grad_probe, act_probe = default_callbacks(train_cfg)
    evals = train_cfg.eval_steps()  # counted, never listed: max_steps may be 10**12
    every = math.lcm(evals.multiples.step, act_probe.interval)
    return {
        "evaluation": len(evals),
        "activation_probes": len(range(-(-evals.multiples.start // every) * every, evals.multiples.stop, every)) + 1,
        "gradient_probe": len(range(0, n, grad_probe.interval)) + (1 if (n - 1) % grad_probe.interval else 0),
        "checkpoint": (n - 1) // train_cfg.ckpt_interval + 1,
    }


def component_costs(shape: Shape, max_steps: int | None = None, n_eval: int = 2) -> dict[str, Any]:
    """Each thing the trainer does besides training steps, timed once here (best of 2) on ResidualGPT.

    Evaluation is timed on n_eval batches and scaled to eval_batches. The gradient probe's
    cost is a probed step minus a plain one (noisy: it is small).
    """
    from interp.checkpoint import save_checkpoint
    from probes import PROBE_BATCHES
    from probes.attention import attention_stats
    from probes.gradients import capture_resid_grads, parameter_grad_norms, resid_grad_sites
    from probes.norms import hidden_norms

    cfg = shape.train
    torch.manual_seed(0)
    model = ResidualGPT(shape.model)
    opt = make_optimizer(model, cfg, torch.device("cpu"))
    batches = fixed_token_batches(shape)
    train_step(model, opt, *batches[0], shape.grad_clip)

    @torch.no_grad()
    def evaluate():
        model.eval()
        for x, y in batches[:n_eval]:
            model(x, y)[1].item()
        model.train()

    def probed_step():
        with capture_resid_grads(model) as grads:
            _, loss = model(*batches[1])
            loss.backward()
        record = parameter_grad_norms(model)
        record["resid"] = [grads.get(site, 0.0) for site in resid_grad_sites(shape.model.n_layers)]
        torch.nn.utils.clip_grad_norm_(model.parameters(), shape.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def activation_probes():
        attention_stats(model, batches[:PROBE_BATCHES])
        hidden_norms(model, batches[:PROBE_BATCHES])
        model.train()

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt.pt"
        seconds = {
            "evaluation": _best_of(evaluate) * cfg.eval_batches / n_eval,
            "activation_probes": _best_of(activation_probes),
            "gradient_probe": _best_of(probed_step) - _best_of(lambda: train_step(model, opt, *batches[1], 1.0)),
            "checkpoint": _best_of(lambda: save_checkpoint(ckpt, model, optimizer=opt.state_dict())),
        }
    counts = run_counts(dataclasses.replace(cfg, max_steps=max_steps or cfg.max_steps))
    return {
        name: {"seconds_each": seconds[name], "count": counts[name],
               "ms_per_step": 1e3 * seconds[name] * counts[name] / (max_steps or cfg.max_steps)}
        for name in seconds
    }


# ----- child processes: memory and the trainer ------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    VmHWM belongs to the process's own address space, which exec replaces; ru_maxrss
    would carry over the parent's peak through exec (Linux), so it is only the fallback.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


RSS_MARK = "peak_rss_mb="


def run_child(argv: list[str], threads: int) -> tuple[str, float, float]:
    """Run `python -m benchmarks.step <argv>`; return (output, its peak RSS in MB, wall seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.step", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    marks = [line for line in proc.stdout.splitlines() if line.startswith(RSS_MARK)]
    if proc.returncode or not marks:
        raise BenchError(f"child run {' '.join(argv)} failed:\n{out[-2000:]}")
    return out, float(marks[-1][len(RSS_MARK):]), wall


def memory_child(kind: str, shape_name: str, sets: list[str]) -> None:
    """In a child: report the peak after imports, then build `kind` (reference, residual) and take two steps."""
    print(f"imports_{RSS_MARK}{peak_rss_mb()}")
    shape = make_shape(shape_name, 1, 1, sets)
    torch.manual_seed(0)
    model = RefGPT(shape.model) if kind == "reference" else ResidualGPT(shape.model)
    opt = make_optimizer(model, shape.train, torch.device("cpu"))
    for x, y in fixed_token_batches(shape, 2):
        train_step(model, opt, x, y, shape.grad_clip)


def set_args(shape: Shape) -> list[str]:
    return [arg for item in shape.sets for arg in ("--set", item)]


def measure_memory(shape: Shape, threads: int) -> dict[str, float]:
    result = {}
    for kind in ("reference", "residual"):
        out, rss, _ = run_child(["--memory-child", kind, "--shapes", shape.name, *set_args(shape)], threads)
        imports = [line for line in out.splitlines() if line.startswith(f"imports_{RSS_MARK}")]
        result[f"{kind}_imports_mb"] = float(imports[-1].split("=")[1])
        result[{"reference": "reference_mb", "residual": "residual_gpt_mb"}[kind]] = rss
    result["imports_mb"] = min(result.pop("reference_imports_mb"), result.pop("residual_imports_mb"))
    return result


class InterleavedReference:
    """A trainer callback: a timed reference step after every `every`-th trainer step.

    on_step runs after the trainer has taken its step's time, so the trainer's step
    timings are untouched; the time spent here is taken off the run's wall time.
    """

    def __init__(self, shape: Shape, every: int):
        torch.manual_seed(0)
        self.shape, self.every = shape, every
        self.model = RefGPT(shape.model)
        self.opt = make_optimizer(self.model, shape.train, torch.device("cpu"))
        self.batches = fixed_token_batches(shape)
        self.samples: list[tuple[int, float]] = []
        self.spent = 0.0

    def _step(self, i: int) -> float:
        prev = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(False)  # as in the rounds
        try:
            t0 = time.perf_counter()
            train_step(self.model, self.opt, *self.batches[i % len(self.batches)], self.shape.grad_clip)
            return time.perf_counter() - t0
        finally:
            torch.use_deterministic_algorithms(prev)

    def on_train_start(self, trainer) -> None:
        self._step(0)  # warm-up

    def on_step(self, trainer, step: int, loss: float) -> None:
        if step % self.every == 0:
            t0 = time.perf_counter()
            self.samples.append((step, self._step(step)))
            self.spent += time.perf_counter() - t0


def measure_trainer(shape: Shape, max_steps: int | None) -> dict[str, Any]:
    """Trainer.run() at the preset's defaults, probes on, with reference steps interleaved.

    Steady state: per logging window (the first, which holds the warm-up, left out),
    the trainer's mean step over the median reference step taken in that window; then
    the median over windows. Whole run: wall time less the interleaved reference steps.
    """
    from probes import default_callbacks
    from training.data import load_corpus
    from training.trainer import Trainer

    train_cfg = dataclasses.replace(shape.train, max_steps=max_steps or shape.train.max_steps)
    corpus = load_corpus(train_cfg.corpus, train_cfg.data_path)
    reference = InterleavedReference(shape, max(1, train_cfg.log_interval // 4))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        callbacks = [*default_callbacks(train_cfg), reference]
        final = Trainer(shape.model, train_cfg, run_dir, callbacks=callbacks, corpus=corpus, progress=False).run()
        metrics = read_jsonl(run_dir / "metrics.jsonl")
    windows = [r for r in metrics if "tokens_per_s" in r]
    ref_all = statistics.median(t for _, t in reference.samples)
    steady, ratios = [], []
    for prev, rec in zip(windows, windows[1:], strict=False):
        ms = 1e3 * shape.tokens_per_step / rec["tokens_per_s"]
        refs = [t for step, t in reference.samples if prev["step"] < step <= rec["step"]]
        steady.append(ms)
        ratios.append(ms / (1e3 * statistics.median(refs or [ref_all])))
    steps = final["steps"]
    run_s = final["wall_time_s"] - reference.spent
    return {
        "steps": steps,
        "steady_ms_per_step": statistics.median(steady) if steady else math.nan,
        "steady_ratio": statistics.median(ratios) if ratios else math.nan,
        "whole_run_ms_per_step": 1e3 * run_s / steps,
        "whole_run_ratio": run_s / steps / ref_all,
        "steps_per_minute": 60 * steps / run_s,
        "reference_ms": 1e3 * ref_all,
        "reference_samples": len(reference.samples),
        "run_wall_s": run_s,
        "train_config": {k: getattr(train_cfg, k) for k in
                         ("max_steps", "eval_interval", "eval_batches", "eval_from", "log_interval", "ckpt_interval")},
    }


def measure_trainer_command(shape: Shape, threads: int, max_steps: int | None) -> dict[str, float]:
    """`python -m training --preset SHAPE` in a child: its peak memory and wall time, imports included."""
    with tempfile.TemporaryDirectory() as out_dir:
        argv = ["--preset", shape.name, "--out", out_dir, "--no-progress", *set_args(shape)]
        if max_steps:
            argv += ["--set", f"max_steps={max_steps}"]
        _, rss, wall = run_child(["--training-child", "--", *argv], threads)
        (final_path,) = Path(out_dir).glob("**/final.json")
        final = json.loads(final_path.read_text())
    return {"trainer_run_mb": rss, "command_wall_s": wall, "run_wall_s": final["wall_time_s"],
            "steps": final["steps"]}


# ----- the command -------------------------------------------------------------------------------------------
def measure_peak() -> float:
    trainer_module._PEAK_FLOPS.clear()  # measured once per process by the trainer; here again at the end
    return peak_matmul_flops(torch.device("cpu"))


def bench_shape(shape: Shape, args) -> dict[str, Any]:
    variants = variants_for(args.compile)
    if args.variants:
        wanted = set(args.variants.split(","))
        unknown = wanted - {v.name for v in variants}
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


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    peak = m["peak_matmul_flops"]
    print(f"torch {m['torch']}, {m['threads']} threads, fp32 CPU; matmul peak {peak / 1e9:.0f} GFLOP/s "
          f"(start {m['peak_start'] / 1e9:.0f}, end {m['peak_end'] / 1e9:.0f}); "
          f"load average {m['loadavg_start']} -> {m['loadavg_end']}")
    if report.get("overrides"):
        print("overrides: " + ", ".join(f"{k}={v}" for k, v in report["overrides"].items()))
    for name, s in report["shapes"].items():
        print(f"\n{name}: {s['describe']}; {s['rounds']} rounds x {s['steps']} steps (+{s['warmup']} warm-up)")
        print(f"  {'variant':26s} {'ms/step':>8s} {'ratio':>6s} {'MFU':>6s} {'min ms':>8s} {'ratio':>6s}  "
              "rounds' ratios")
        for vname, v in s["variants"].items():
            mfu = v["flops_per_step"] / (v["ms_per_step"] / 1e3) / peak
            rr = " ".join(f"{r:.3f}" for r in v["round_ratios"])
            print(f"  {vname:26s} {v['ms_per_step']:8.1f} {v['ratio']:6.3f} {100 * mfu:5.1f}% {v['ms_min']:8.1f} "
                  f"{v['ratio_min']:6.3f}  {rr}   {v['note']}")
        if "compile" in s:
            c = s["compile"]
            print(f"  compile: {c['compile_s']:.1f} s extra on the first step, steady speed-up {c['speedup']:.3f}x; "
                  f"bitwise run-to-run {c['bitwise_repeat']}, run_with_cache {c['run_with_cache_ok']}, "
                  f"run_with_hooks {c['run_with_hooks_ok']}, "
                  f"state_dict keys unchanged {c['state_dict_keys_unchanged']}")
        if "costs" in s:
            print(f"  the trainer's other work at {name}'s intervals, timed one by one (per step of the run; "
                  "ratio to the reference step):")
            for cname, c in s["costs"].items():
                print(f"    {cname:18s} {c['seconds_each']:7.3f} s x {c['count']:3d} = "
                      f"{c['ms_per_step']:6.1f} ms/step  {c['ratio_to_reference']:.3f}x")
        if "trainer" in s:
            t = s["trainer"]
            print(f"  Trainer.run() ({t['steps']} steps, probes on; {t['reference_samples']} reference steps "
                  f"interleaved, median {t['reference_ms']:.1f} ms):")
            print(f"    steady-state step  {t['steady_ms_per_step']:9.1f} ms  {t['steady_ratio']:.3f}x")
            print(f"    whole run per step {t['whole_run_ms_per_step']:9.1f} ms  {t['whole_run_ratio']:.3f}x  "
                  f"({t['steps_per_minute']:.0f} steps/min)")
        if "memory" in s:
            mem = s["memory"]
            print(f"  peak RSS: imports only {mem['imports_mb']:.0f} MB, reference step {mem['reference_mb']:.0f} MB, "
                  f"ResidualGPT step {mem['residual_gpt_mb']:.0f} MB")
            if "trainer_run_mb" in mem:
                print(f"  python -m training --preset {name} ({mem['steps']} steps): peak RSS "
                      f"{mem['trainer_run_mb']:.0f} MB, {mem['command_wall_s']:.1f} s in all "
                      f"({mem['run_wall_s']:.1f} s in the run, the rest imports, data, model build)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.step",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="variants: reference, " + ", ".join(v.name for v in variants_for(True)[1:])
        + "\nshapes (from training/presets.py): " + ", ".join(
            f"{n} ({PRESETS[n]['model']['n_layers']}L d{PRESETS[n]['model']['d_model']}; smoke is the tiny one CI runs)"
            if n == "smoke" else n for n in SHAPE_DEFAULTS
        ),
    )
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated shapes (default: {DEFAULT_SHAPES})")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads, children too (default: 2)")
    p.add_argument("--steps", type=int, help="timed steps per variant per round (default per shape: "
                   + ", ".join(f"{k} {v[0]}" for k, v in SHAPE_DEFAULTS.items()) + ")")
    p.add_argument("--rounds", type=int, help="alternating rounds (default per shape: "
                   + ", ".join(f"{k} {v[1]}" for k, v in SHAPE_DEFAULTS.items()) + ")")
    p.add_argument("--variants", help="comma-separated subset of variants (the reference is always timed)")
    p.add_argument("--compile", action="store_true", help="add torch.compile: compile time, speed-up, checks")
    p.add_argument("--trainer", default="smoke,cpu-quick",
                   help="shapes whose trainer run is measured (default: smoke,cpu-quick; paper-10m takes hours)")
    p.add_argument("--trainer-steps", type=int, help="max_steps of the trainer run (default: the preset's)")
    p.add_argument("--no-trainer", action="store_true", help="skip the trainer run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset field for every shape, as `python -m training --set` does "
                        "(e.g. eval_from=0 to price the first half's evaluations); repeatable")
    p.add_argument("--memory", default="smoke,cpu-quick,paper-10m", help="shapes whose peak memory is measured")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--json", action="store_true", help="print the results as JSON (progress goes to stderr)")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    p.add_argument("--training-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("training_args", nargs="*", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    with interrupts():  # SIGTERM like Ctrl-C
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.training_child:  # python -m training ARGS, then this process's peak memory
        from training.__main__ import main as train_main

        rc = train_main(args.training_args)
        print(f"{RSS_MARK}{peak_rss_mb()}")
        return rc
    try:
        if args.threads <= 0 or any(v is not None and v <= 0 for v in (args.steps, args.rounds, args.trainer_steps)):
            raise BenchError("--threads, --steps, --rounds and --trainer-steps must be positive")
        torch.set_num_threads(args.threads)
        shapes = [make_shape(n.strip(), args.steps, args.rounds, args.set) for n in args.shapes.split(",")
                  if n.strip()]
        if args.memory_child:
            memory_child(args.memory_child, shapes[0].name, args.set)
            print(f"{RSS_MARK}{peak_rss_mb()}")
            return 0
        report: dict[str, Any] = {"machine": {
            "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()], "peak_start": measure_peak(),
        }, "overrides": parse_overrides(args.set), "shapes": {}}
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
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (interp.signals): nothing is written but stdout
        code = exit_code(e)
        print(f"\ninterrupted ({signal_name(code)}); no report was printed", file=sys.stderr)
        return code
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
