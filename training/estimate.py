"""How long runs will take here: each shape's training timed now, through the code that will train it.

A FLOP count divided by an assumed rate was 6x off at the phase diagram's small shapes, where a step
is bound by memory traffic and per-operation overhead, not by the matmul peak. A bare forward and
backward timed alone was 10-20x under at the smoke shape: the real step also samples every member's
batch, takes per-member gradient norms and clips, and the probes at evaluations (an experiment's own
callbacks: the escape-time probe fits a decoder) can cost more than the steps. So each group the runs
will train in (training.grouping.group: ensembles or solo) is built again as throwaway trainers in a
temporary directory (weights, optimizer, sampler: Trainer.setup), and timed there with the real
pieces: the step (the median of a few, a gradient-probe step apart), one evaluation, every
evaluation callback firing once, one checkpoint of every member, and the setup itself. The estimate
multiplies them by the steps, evaluations, firings and checkpoints each run will do. A callback fires
at a step where, asked with only the run's config in reach, it reaches for more (the model, the
batches). Nothing the runs own is written, the global random state is restored.

Not in it: what the experiment does before and after training (start-up, the corpus, the reference
levels, its analysis and its report); experiments.runner.cost says so where it prints a time.
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from training.grouping import group, train_key, trains_stacked
from training.stacked import shape_key
from training.steps import SoloStep, StackedStep
from training.trainer import Trainer

TIMED_STEPS = 3
EVAL_TIMED = 2  # validation batches timed; the evaluation's time is scaled to all of them


class _Fires(Exception):
    """Raised by _ConfigOnly when a callback reaches past the config: it would do work at that step."""


class _ConfigOnly:
    """What a callback sees of a trainer when asked only whether it fires at a step."""

    def __init__(self, t: Trainer):
        self.train_cfg, self.model_cfg, self.is_main, self.rank = t.train_cfg, t.model_cfg, True, 0

    def __getattr__(self, name: str):
        raise _Fires(name)


def firings(callback, t: Trainer) -> int:
    """How many of the run's evaluation steps `callback.on_eval` does work at."""
    if not hasattr(callback, "on_eval"):
        return 0
    probe, asked, n = copy.deepcopy(callback), _ConfigOnly(t), 0
    for step in t.train_cfg.eval_steps():
        try:
            probe.on_eval(asked, step, math.nan)
        except Exception:  # _Fires, or a callback that needs more to decide: counted at every evaluation
            n += 1  # (the latter an over-estimate)
    return n


@contextlib.contextmanager
def _throwaway(members: Sequence[Trainer]) -> Iterator[list[Trainer]]:
    """Copies of the members, set up (weights, optimizer, sampler) in a temporary directory."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    with tempfile.TemporaryDirectory(prefix="estimate-") as tmp:
        try:
            copies = []
            for i, t in enumerate(members):
                c = Trainer(
                    t.model_cfg,
                    t.train_cfg,
                    Path(tmp) / f"member{i}",
                    callbacks=copy.deepcopy(t.callbacks),
                    corpus=t.corpus,
                    progress=False,
                    model_init=t.model_init,
                )
                c.run_dir.path.mkdir(parents=True)
                c.setup()
                copies.append(c)
            yield copies
        finally:
            torch.use_deterministic_algorithms(deterministic)  # setup turns it on for deterministic runs


def _median_time(fn, steps: Sequence[int], warm_up: bool = True) -> float:
    if warm_up:
        fn(steps[0])
    times = []
    for s in steps:
        start = time.perf_counter()
        fn(s)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _group_seconds(members: Sequence[Trainer], stacked: bool) -> dict[str, float]:
    """One group's costs, timed on throwaway copies: per step (plain and gradient-probe), per evaluation, per
    callback firing (member 0's, by callback index), per checkpoint of the group, and the setup."""
    cfg = members[0].train_cfg
    start = time.perf_counter()
    with _throwaway(members if stacked else members[:1]) as copies:
        setup = time.perf_counter() - start
        if stacked:
            for c in copies:
                c.rng = torch.get_rng_state()  # what the ensemble's setup keeps per member, for its saves
        steps = StackedStep(copies) if stacked else SoloStep(copies[0])
        steps.at(1)
        step, save = steps.train, steps.save
        plain = [s for s in range(1, cfg.max_steps) if s % cfg.log_interval][:TIMED_STEPS] or [1]
        out = {"setup": setup, "step": _median_time(step, plain)}
        out["log_step"] = _median_time(step, [0], warm_up=False)  # a logging step: the gradient probe is due
        # an evaluation from EVAL_TIMED of its batches, each member's (at cpu-quick one evaluation of 32 batches
        # is ~60 steps' work); it and each probe timed at their second call: a first one's one-off costs
        # (imports, first allocations) multiplied by every firing made the smoke grid's 25 s read as 10.7 min
        first = copies[0]
        timed = first.val_batches[:EVAL_TIMED]
        one = _median_time(lambda _: first.val_loss(timed), [0])
        out["eval"] = one * len(copies) * cfg.eval_batches / len(timed)
        first.step = cfg.max_steps  # every callback fires at the last step
        for i, cb in enumerate(_on_eval(first)):
            out[f"callback{i}"] = _median_time(lambda s, cb=cb: cb.on_eval(first, s, 3.0), [cfg.max_steps])
        out["checkpoint"] = _median_time(lambda _: save(), [0], warm_up=False)
    return out


def _on_eval(t: Trainer) -> list:
    """The callbacks that run at evaluations, in order (an ensemble takes the gradient probe over itself)."""
    return [cb for cb in t.callbacks if hasattr(cb, "on_eval")]


def _counts(t: Trainer) -> dict[str, int]:
    cfg = t.train_cfg
    steps = range(cfg.max_steps)
    return {
        "log_steps": sum(1 for s in steps if s % cfg.log_interval == 0),
        "evals": len(cfg.eval_steps()),
        "checkpoints": 1 + sum(1 for s in steps if (s + 1) % cfg.ckpt_interval == 0 and s + 1 < cfg.max_steps),
    }


def estimate_parts(trainers: Sequence[Trainer], ensemble_size: int) -> dict[str, float]:
    """Seconds to train `trainers` (unfinished runs, built but not run) as the launcher will group them, by part:
    steps, evaluations, callbacks (the probes at evaluations), checkpoints, setup."""
    parts = dict.fromkeys(("steps", "evaluations", "callbacks", "checkpoints", "setup"), 0.0)
    if not trainers:
        return parts
    rng = torch.get_rng_state()
    timed: dict[tuple, dict[str, float]] = {}
    try:
        for members in group(trainers, ensemble_size, report=False):  # the launcher prints the sizes
            stacked = trains_stacked(members, ensemble_size)
            first = members[0]
            callbacks = tuple(type(cb).__name__ for cb in _on_eval(first))
            # the wiring and the self-score bias change no cost: the routing test's nine variants time as three
            shape = first.model_cfg.replace(residual="full", self_bias=0.0)
            key = (shape_key(shape), train_key(first.train_cfg), len(members), stacked, callbacks)
            if key not in timed:
                timed[key] = _group_seconds(members, stacked)
            t, n = timed[key], _counts(first)
            runs = 1 if stacked else len(members)  # a group trained solo: each member on its own
            cfg = first.train_cfg
            parts["steps"] += runs * (n["log_steps"] * t["log_step"] + (cfg.max_steps - n["log_steps"]) * t["step"])
            parts["evaluations"] += runs * n["evals"] * t["eval"]
            parts["checkpoints"] += runs * n["checkpoints"] * t["checkpoint"]
            parts["setup"] += runs * t["setup"]
            for m in members:  # each member's callbacks fire on its own model, stacked or not
                for i, cb in enumerate(_on_eval(m)):
                    parts["callbacks"] += firings(cb, m) * t.get(f"callback{i}", 0.0)
    finally:
        torch.set_rng_state(rng)
    return parts


def estimate_seconds(trainers: Sequence[Trainer], ensemble_size: int) -> float:
    """Seconds to train `trainers` (unfinished runs, built but not run) as the launcher will group them."""
    return sum(estimate_parts(trainers, ensemble_size).values())
