"""Every field of a checkpoint's training state checked before a resume uses any of it.

A resume loads weights and optimizer state and then rewrites metrics.jsonl and
probes.jsonl (dropping what was logged after the checkpoint). A field of the
wrong type, range, shape or dtype used to load without a word (torch casts
float16 or int64 weights; AdamW takes a mis-shaped moment) and fail steps
later, after those logs were rewritten, or to give other numbers. Here each is
checked first, and a bad one is a CheckpointError naming the file and field.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from interp.errors import CheckpointError
from interp.files.checks import is_int, is_number
from interp.files.io import read_jsonl
from training import steps_by


def check_training_state(ckpt, model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_cfg, path: Path) -> None:
    """Raise CheckpointError for the first field of ckpt (weights and training state) a resume cannot use."""
    problems = weight_problems(ckpt.weights, model) or state_problems(ckpt.state, train_cfg)
    run = Path(path).parent  # named as an ensemble names its members (training.steps.StackedStep.names)
    if not problems:
        problems = steps_by.problems(ckpt.state, run.name if run.parent.name == "" else f"{run.parent.name}/{run.name}")
    if not problems:
        problems = optimizer_problems(ckpt.state["optimizer"], optimizer, train_cfg.grad_clip)
    if problems:
        raise CheckpointError(f"{path} cannot be resumed: {problems[0]}; move it aside to start this run again")


def weight_problems(weights: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    ours = model.state_dict()
    missing, extra = sorted(set(ours) - set(weights)), sorted(set(weights) - set(ours))
    if missing or extra:
        return [f"its weights do not fit this model (missing {missing[:3]}, unexpected {extra[:3]})"]
    for name, ref in ours.items():
        w = weights[name]
        if w.dtype != ref.dtype or w.shape != ref.shape:
            return [f"weight {name} is {w.dtype} {tuple(w.shape)}, this model's is {ref.dtype} {tuple(ref.shape)}"]
    return []


def state_problems(state: dict[str, Any], cfg) -> list[str]:
    step, best, totals = state.get("step"), state.get("best"), state.get("totals")
    if not is_int(step) or not 0 <= step <= cfg.max_steps:
        return [f"step {step!r} is not an integer in [0, max_steps={cfg.max_steps}]"]
    if not isinstance(best, dict) or not is_number(best.get("val_loss")) or math.isnan(best["val_loss"]):
        return [f"best {best!r} is not {{'val_loss': number, 'step': step or None}}"]
    best_step = best.get("step")
    if not (best_step is None and best["val_loss"] == math.inf) and not (
        is_int(best_step) and 0 <= best_step <= step and math.isfinite(best["val_loss"])
    ):
        return [f"best {best!r} is not a finite loss at a step <= {step} (or inf with step None)"]
    if not isinstance(totals, dict):
        return [f"totals {totals!r} is not a dict"]
    for key, kind in (("train_time", is_number), ("train_tokens", is_int), ("wall_time", is_number)):
        v = totals.get(key)
        if not kind(v) or not math.isfinite(v) or v < 0:
            return [f"totals[{key!r}] {v!r} is not a finite number >= 0"]
    for key in ("val_generator", "torch_rng"):
        v = state.get(key)
        if not isinstance(v, torch.Tensor) or v.dtype != torch.uint8 or v.shape != torch.get_rng_state().shape:
            return [f"{key} is not a CPU generator state (a uint8 tensor of {torch.get_rng_state().numel()} bytes)"]
    sampler = state.get("sampler")
    if not isinstance(sampler, dict) or not (
        is_int(sampler.get("seed")) and is_int(sampler.get("draws")) and sampler["draws"] >= 0
    ):
        return [f"sampler state {_short(sampler)} is not {{'generator', 'seed', 'draws' >= 0}}"]
    gen = sampler.get("generator")
    if not isinstance(gen, torch.Tensor) or gen.dtype != torch.uint8 or gen.shape != torch.get_rng_state().shape:
        return ["the sampler's generator is not a CPU generator state"]
    return []


# Not the update rule: the parameters, the lr (set by the schedule at every step, training.optimizer.lr_at) and
# how torch runs the update on this device (the same arithmetic).
_SCHEDULED = {"params", "lr", "initial_lr", "foreach", "fused", "capturable", "differentiable"}


def optimizer_problems(saved: Any, optimizer: torch.optim.Optimizer, grad_clip: float = 0.0) -> list[str]:
    """AdamW's state_dict: the same groups and parameter count and the settings this run's optimizer has (betas,
    eps, weight_decay, maximize, amsgrad, ...: a resume must not change the update rule), moments shaped and typed
    as the parameters, exp_avg_sq >= 0, and both inside what clipped gradients can give (|g| <= grad_clip)."""
    if (
        not isinstance(saved, dict)
        or not isinstance(saved.get("state"), dict)
        or not isinstance(saved.get("param_groups"), list)
    ):
        return ["the optimizer state is not {'state': dict, 'param_groups': list}"]
    groups = optimizer.param_groups
    if len(saved["param_groups"]) != len(groups) or any(
        not isinstance(s, dict) or len(s.get("params", ())) != len(g["params"])
        for s, g in zip(saved["param_groups"], groups, strict=True)
    ):
        return ["the optimizer's parameter groups do not match this model's"]
    for n, (s, g) in enumerate(zip(saved["param_groups"], groups, strict=True)):
        for key in sorted(set(s) - _SCHEDULED):  # a key an older torch did not write takes torch's default
            if key not in g:
                return [f"optimizer group {n} has a setting {_short(key)} this run's AdamW does not have"]
            if not _same(s[key], g[key]):
                return [f"optimizer group {n}'s {key} is {_short(s[key])}; this run's is {_short(g[key])}"]
    bound = grad_clip * 1.01 if grad_clip > 0 else 1e8  # an average of clipped gradients; else check_finite's bound
    params = [p for g in groups for p in g["params"]]
    ids = [i for s in saved["param_groups"] for i in s["params"]]
    for i, entry in saved["state"].items():
        if i not in ids:
            return [f"the optimizer state names parameter {i!r}, which no group holds"]
        p = params[ids.index(i)]
        if not isinstance(entry, dict):
            return [f"the optimizer state of parameter {i} is not a dict"]
        for key in ("exp_avg", "exp_avg_sq"):
            m = entry.get(key)
            if not isinstance(m, torch.Tensor) or m.shape != p.shape or m.dtype != p.dtype:
                got = f"{m.dtype} {tuple(m.shape)}" if isinstance(m, torch.Tensor) else repr(type(m).__name__)
                return [f"Adam's {key} of parameter {i} is {got}, the parameter is {p.dtype} {tuple(p.shape)}"]
            if not bool(torch.isfinite(m).all()):
                return [f"Adam's {key} of parameter {i} holds non-finite values"]
            top = bound**2 if key == "exp_avg_sq" else bound
            if key == "exp_avg_sq" and bool((m < 0).any()):
                return [f"Adam's exp_avg_sq of parameter {i} holds negative values (it is an average of squares)"]
            if m.numel() and float(m.abs().max()) > top:
                return [
                    f"Adam's {key} of parameter {i} reaches {float(m.abs().max()):.3g}, past {top:.3g}, which "
                    + ("gradients clipped to grad_clip" if grad_clip > 0 else "no trained run's")
                    + " can give"
                ]
        step = entry.get("step")
        value = step.item() if isinstance(step, torch.Tensor) and step.numel() == 1 else step
        if not is_number(value) or not math.isfinite(value) or value < 0:
            return [f"Adam's step count of parameter {i} is {_short(step)}"]
    return []


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b) and a == b


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) < 80 else text[:77] + "..."


def logs_before(step: int, paths: list[Path]) -> dict[str, str]:
    """sha256 per log of its records before step: what a resume from a checkpoint at step keeps. Sealed in the
    checkpoint, so logs edited, deleted or swapped between a kill and the resume are seen, not carried on."""
    out = {}
    for path in paths:
        kept = [r for r in read_jsonl(path, torn_tail_ok=True) if r.get("step", 0) < step]
        out[path.name] = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
    return out


def check_logs_before(state: dict[str, Any], paths: list[Path], ckpt_path: Path) -> None:
    """The logs a resume keeps are the ones the checkpoint was saved with, and its best is one of them."""
    sealed, step = state.get("logs_before_step"), state["step"]
    if sealed is None:  # written before the seal existed
        return
    now = logs_before(step, paths)
    for path in paths:
        if sealed.get(path.name) != now[path.name]:
            raise CheckpointError(
                f"{path}: its records before step {step} are not the ones {ckpt_path} was saved with (edited, "
                "removed, or from another run); move the run directory aside to train it again"
            )
    best = state["best"]
    metrics = next((p for p in paths if p.name == "metrics.jsonl"), None)
    if best.get("step") is not None and metrics is not None:
        logged = [r.get("val_loss") for r in read_jsonl(metrics, torn_tail_ok=True) if r.get("step") == best["step"]]
        if best["val_loss"] not in logged:
            raise CheckpointError(
                f"{ckpt_path} cannot be resumed: its best validation loss {best['val_loss']!r} at step {best['step']} "
                f"is not in {metrics}; move the run directory aside to train it again"
            )
