"""How long runs will take here: a few steps of each shape timed now, the way they will train.

A FLOP count divided by an assumed rate was 6x off at the phase diagram's small shapes, where a step
is bound by memory traffic and per-operation overhead, not by the matmul peak. So each group the
runs will train in (training.grouping.group: ensembles or solo) is built with throwaway weights and
timed for a few optimizer steps, and each member's evaluation forward is timed on one batch; the
estimate multiplies them by the steps, evaluations and activation probes the runs will do. Nothing
is written and the global random state is restored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from training.trainer import Trainer

TIMED_STEPS = 3
PROBE_FORWARDS = 4  # an activation probe point: attention and norms on 2 batches each


def _time(fn, n: int) -> float:
    fn()  # warm up
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _random_batch(cfg, train_cfg, k: int | None = None):
    shape = (train_cfg.batch_size, cfg.n_ctx) if k is None else (k, train_cfg.batch_size, cfg.n_ctx)
    return torch.randint(0, cfg.d_vocab, shape), torch.randint(0, cfg.d_vocab, shape)


def _step_seconds(members: list[Trainer], stacked: bool) -> float:
    from interp.model import ResidualGPT, train_mode_hooks_expected
    from training.stacked import StackedAdamW, StackedGPT

    first = members[0]
    models = [ResidualGPT(t.model_cfg) for t in members]
    if stacked:
        model = StackedGPT(models)
        names = model.names
        opt = StackedAdamW({n: model.p(n) for n in names}, {n: model.p(n).dim() >= 3 for n in names}, (0.9, 0.95))
        x, y = _random_batch(first.model_cfg, first.train_cfg, len(members))
        lr = torch.full((len(members),), 1e-4)

        def step():
            model(x, y).sum().backward()
            opt.step(lr, lr * 0)
            model.zero_grad(set_to_none=True)

        return _time(step, TIMED_STEPS)
    model = models[0]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = _random_batch(first.model_cfg, first.train_cfg)

    def solo_step():
        with train_mode_hooks_expected():
            model(x, y)[1].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return _time(solo_step, TIMED_STEPS) * first.train_cfg.grad_accum


@torch.no_grad()
def _eval_seconds(t: Trainer) -> float:
    from interp.model import ResidualGPT

    model = ResidualGPT(t.model_cfg).eval()
    x, y = _random_batch(t.model_cfg, t.train_cfg)
    return _time(lambda: model(x, y), 2)


def estimate_seconds(trainers: Sequence[Trainer], ensemble_size: int) -> float:
    """Seconds to train `trainers` (unfinished runs, built but not run) as the launcher will group them."""
    from training.grouping import group, group_key, trains_stacked

    if not trainers:
        return 0.0
    rng = torch.get_rng_state()
    steps: dict[tuple, float] = {}
    evals: dict[tuple, float] = {}
    total = 0.0
    try:
        for members in group(trainers, ensemble_size):
            stacked = trains_stacked(members, ensemble_size)
            key = (group_key(members[0]), len(members), stacked, members[0].model_cfg.mixer)
            if key not in steps:
                steps[key] = _step_seconds(members, stacked)
            cfg = members[0].train_cfg
            total += steps[key] * cfg.max_steps * (1 if stacked else len(members))
            for t in members:
                eval_key = (t.model_cfg, t.train_cfg.batch_size)  # hashable: mixer_params too
                if eval_key not in evals:
                    evals[eval_key] = _eval_seconds(t)
                tc = t.train_cfg
                n_evals = len(tc.eval_steps())
                interval = tc.probe_interval or 2 * tc.eval_interval
                n_probes = (
                    len([s for s in tc.eval_steps() if s % interval == 0 or s == tc.max_steps]) if tc.probes else 0
                )
                total += evals[eval_key] * (n_evals * tc.eval_batches + n_probes * PROBE_FORWARDS)
    finally:
        torch.set_rng_state(rng)
    return total
