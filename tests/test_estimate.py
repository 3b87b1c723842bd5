"""training.estimate: the time a set of runs takes here, from their real step, evaluations, probes and checkpoints
timed on throwaway copies (issue 46: a smoke grid printed "about 0.1 min" and took 108 s - its probes at every
evaluation were not in the estimate)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.runner.cost import duration_text
from probes import default_callbacks
from training.data import load_corpus
from training.estimate import estimate_parts, estimate_seconds, firings
from training.presets import resolve
from training.rundir import RunDir
from training.trainer import Trainer

SLEEP = 0.05


class SlowProbe:
    """A probe that costs SLEEP seconds at every `interval`-th step and at the last, and writes a record."""

    def __init__(self, interval: int):
        self.interval = interval

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if step % self.interval and step != trainer.train_cfg.max_steps:
            return
        time.sleep(SLEEP)
        trainer.append(
            "probes.jsonl",
            {"step": step, "probe": "slow", "norm": float(next(trainer.model.parameters()).detach().norm())},
        )


def trainer(out: Path, seed: int, probe: SlowProbe | None = None, **overrides) -> Trainer:
    spec = resolve("smoke", {"seed": seed, **overrides})
    corpus = load_corpus(spec.train.corpus, spec.train.data_path)
    spec = spec.fit_vocab(corpus.vocab_size)
    t = Trainer(spec.model, spec.train, RunDir(out / f"seed{seed}"), corpus=corpus, progress=False)
    t.callbacks.extend(default_callbacks(spec.train))
    if probe is not None:
        t.callbacks.append(probe)
    return t


def test_a_callback_fires_where_it_would_reach_past_the_config(data):
    t = trainer(Path("/nonexistent"), 1)  # smoke: 40 steps, evaluated every 10 from step 0
    assert t.train_cfg.eval_steps() == [0, 10, 20, 30, 40]
    assert firings(SlowProbe(20), t) == 3  # 0, 20, 40
    assert firings(SlowProbe(30), t) == 3  # 0, 30 and the last step
    assert firings(object(), t) == 0  # no on_eval


def test_the_estimate_counts_the_probes_at_evaluations(tmp_path, data):
    """Two runs with a probe of known cost firing 3 times each: the callbacks' part holds 6 x its cost, which a
    step-only estimate left out; nothing of the runs is written and the random state is restored."""
    plain = [trainer(tmp_path, s) for s in (1, 2)]
    probed = [trainer(tmp_path, s, SlowProbe(20)) for s in (1, 2)]
    rng = torch.get_rng_state()
    without, with_probe = estimate_parts(plain, 16), estimate_parts(probed, 16)
    assert torch.equal(torch.get_rng_state(), rng) and not any(tmp_path.iterdir())
    assert with_probe["callbacks"] >= 6 * SLEEP  # sleep() waits at least SLEEP
    assert with_probe["callbacks"] - without["callbacks"] < 6 * SLEEP + 0.5
    assert all(with_probe[k] > 0 for k in ("steps", "evaluations", "checkpoints"))
    assert estimate_seconds(probed, 16) >= 6 * SLEEP and estimate_seconds([], 16) == 0.0


def test_a_short_time_is_not_written_as_zero_minutes():
    assert duration_text(0.2) == "about 1 s" and duration_text(40) == "about 40 s"
    assert duration_text(150) == "about 2.5 min" and duration_text(9000) == "about 2.5 h"
