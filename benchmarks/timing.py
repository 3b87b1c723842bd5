"""Timing: the variants' steps in alternating rounds, torch.compile's checks, the trainer's other work
timed one by one, and Trainer.run() with reference steps interleaved."""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.reference import RefGPT
from benchmarks.shapes import Shape, fixed_token_batches
from benchmarks.variants import StepVariant, deterministic_mode, train_step
from interp.files.io import read_jsonl
from interp.model.gpt import ResidualGPT
from training.compile import maybe_compile
from training.flops import flops_per_token
from training.optimizer import make_optimizer


def time_variants(shape: Shape, variants: list[StepVariant], seed: int = 0) -> dict[str, dict[str, Any]]:
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

    def run(v: StepVariant, n: int) -> list[float]:
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
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
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
            losses.append(
                [train_step(model, opt, *batches[i % len(batches)], shape.grad_clip).item() for i in range(n_steps)]
            )
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
        "run_with_hooks_ok": bool(
            torch.allclose(patched_e, patched_c, atol=1e-4, rtol=1e-4) and not torch.allclose(patched_c, logits_c)
        ),
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
    from interp.files.checkpoint import save_checkpoint
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
        name: {
            "seconds_each": seconds[name],
            "count": counts[name],
            "ms_per_step": 1e3 * seconds[name] * counts[name] / (max_steps or cfg.max_steps),
        }
        for name in seconds
    }


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
        "train_config": {
            k: getattr(train_cfg, k)
            for k in ("max_steps", "eval_interval", "eval_batches", "eval_from", "log_interval", "ckpt_interval")
        },
    }
