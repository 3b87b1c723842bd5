"""Probes: measurements usable live (trainer callbacks) and post hoc (on a checkpoint).

    attention.py   alpha_tt, previous-token weight, entropy, attended distance (hook_pattern; asks the registry)
    gradients.py   per-block attention / MLP / embedding gradient norms, dLoss/d(resid)
    norms.py       residual-stream norm profile and its growth ratio
    identity.py    linear decoders of the tokens at offsets 0, -1, -2 at every residual site
                   (IdentityProbe: at the end of training; not in default_callbacks)
    softmax_fit.py the decoders' fit: softmax regressions on standardised activations (L-BFGS, decay grid)
    decoders.py    fit_decoders: fitted once on a clean model, applied to intervened activations
    uniformity.py  token uniformity at every residual site (Dong et al.'s residual, cosine between positions,
                   effective rank), W_Q/W_K against W_V/W_O gradients; UniformityProbe

This file holds the live callbacks GradientProbe and ActivationProbe, default_callbacks (what every run takes)
and measure() (attention, norms and gradients post hoc on a model or checkpoint; identity and uniformity have
their own measure_identity and token_uniformity). Live, a probe appends records {"step", "probe", ...} to
probes.jsonl in the run directory.

Adding a probe: the measurement in its own module here (a function of a model and batches, eval mode through
interp.model.eval_mode), and a callback with the trainer events it needs (training.loop lists them: on_eval and
on_train_end run in ensembles too; on_step_begin, on_backward and on_step make a run train alone,
training.grouping) that writes with trainer.append("probes.jsonl", {...}); a record may hold no NaN or infinity
(the JSON writers refuse it and the run stops: write None, as uniformity's finite_record does). Put it in
default_callbacks for every run, or in an experiment's Group.callbacks for one experiment's runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from interp.command.entry import refuse_library_module
from interp.model.api import as_batch_pairs
from probes.attention import attention_stats, pattern_stats, uniform_baseline
from probes.gradients import capture_resid_grads, gradient_flow, parameter_grad_norms, resid_grad_sites
from probes.identity import IdentityProbe, identity_summary, probe_model
from probes.norms import hidden_norms

refuse_library_module(__file__)  # python -m <a module that does not run>: one line, exit 2

PROBE_BATCHES = 2  # fixed validation batches the activation probes read (kept small: overhead <= 10%)


def due(step: int, interval: int, trainer) -> bool:
    """Whether a probe run at evaluations fires at step: every `interval`-th step and the last one."""
    return step % interval == 0 or step == trainer.train_cfg.max_steps


class GradientProbe:
    """Gradient norms at every `interval`-th step and the last one, before clipping; with `dense_until` d >= 0,
    also at every step from 0 to d (the first steps, densely: the probe reads, so no run's numbers change)."""

    def __init__(self, interval: int, dense_until: int = -1):
        self.interval = interval
        self.dense_until = dense_until
        self._stack: contextlib.ExitStack | None = None
        self._grads: dict[str, float] = {}

    def _due(self, trainer, step: int) -> bool:
        return step <= self.dense_until or step % self.interval == 0 or step == trainer.train_cfg.max_steps - 1

    def on_step_begin(self, trainer, step: int) -> None:
        if self._due(trainer, step):
            self._stack = contextlib.ExitStack()
            self._grads = self._stack.enter_context(capture_resid_grads(trainer.model))

    def on_backward(self, trainer, step: int) -> None:
        if self._stack is None:
            return
        self._stack.close()
        self._stack = None
        record = parameter_grad_norms(trainer.model)
        record["resid"] = [self._grads.get(s, 0.0) for s in resid_grad_sites(trainer.model.cfg.n_layers)]
        trainer.append("probes.jsonl", {"step": step, "probe": "gradients", **record})

    def on_train_end(self, trainer) -> None:
        if self._stack is not None:
            self._stack.close()


class ActivationProbe:
    """alpha_tt and hidden norms on the first fixed validation batches, at evaluation steps."""

    def __init__(self, interval: int, n_batches: int = PROBE_BATCHES):
        self.interval = interval
        self.n_batches = n_batches

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if not due(step, self.interval, trainer):
            return
        batches = trainer.val_batches[: self.n_batches]
        trainer.append("probes.jsonl", {"step": step, "probe": "attention", **attention_stats(trainer.model, batches)})
        trainer.append("probes.jsonl", {"step": step, "probe": "norms", **hidden_norms(trainer.model, batches)})


def default_callbacks(train_cfg, dense_until: int = -1) -> list:
    """Gradient probe at every logging step (and every step to dense_until: GradientProbe); activation probes at
    evaluations, every probe_interval steps.

    The activation probes run with the evaluations, so only where the run evaluates (from
    eval_from x max_steps on) and always at the last step. The default interval, two
    evaluation intervals, keeps the probes' cost within 10% of training time (measured by
    tests/test_slow.py).
    """
    interval = train_cfg.probe_interval or 2 * train_cfg.eval_interval
    if interval % train_cfg.eval_interval:
        interval = train_cfg.eval_interval * max(1, round(interval / train_cfg.eval_interval))
    return [GradientProbe(train_cfg.log_interval, dense_until), ActivationProbe(interval)]


def measure(checkpoint_or_model: Any, batches) -> dict:
    """All probes post hoc: {"attention", "norms", "gradients"} as plain dicts.

    batches: (x, y) pairs, or token tensors [batch, pos] whose targets are the
    next tokens (x = tokens[:, :-1], y = tokens[:, 1:]), or one such tensor.
    Every probe reads every batch: the gradients are those of the mean loss over all their tokens.
    """
    model = probe_model(checkpoint_or_model)
    batches = as_batch_pairs(batches)
    return {
        "attention": attention_stats(model, batches),
        "norms": hidden_norms(model, batches),
        "gradients": gradient_flow(model, *_one_batch(batches)),
    }


def _one_batch(pairs: list) -> tuple:
    """(x, y) pairs as one (x, y): shorter rows padded on the right with token 0 and target -1, which the loss
    masks and no earlier position sees (causal), so its gradients are those of the mean loss over every token."""
    if len(pairs) == 1:
        return pairs[0]
    n = max(x.shape[1] for x, _ in pairs)
    device = pairs[0][0].device
    xs = [torch.nn.functional.pad(x.to(device), (0, n - x.shape[1]), value=0) for x, _ in pairs]
    ys = [torch.nn.functional.pad(y.to(device), (0, n - y.shape[1]), value=-1) for _, y in pairs]
    return torch.cat(xs), torch.cat(ys)


__all__ = [
    "ActivationProbe",
    "GradientProbe",
    "IdentityProbe",
    "attention_stats",
    "default_callbacks",
    "due",
    "gradient_flow",
    "hidden_norms",
    "identity_summary",
    "measure",
    "parameter_grad_norms",
    "pattern_stats",
    "uniform_baseline",
]
