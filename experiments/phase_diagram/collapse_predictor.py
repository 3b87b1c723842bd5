"""Can the first steps tell whether a cell collapses? Early features of a run, and a held-out test of each.

Per run, from its probe records (probes.GradientProbe, ActivationProbe, and EarlyIdentity below):

    grad0           block-0 parameter-gradient norm (attention and MLP together) at step 0
    grad_warm       the same at the end of warm-up (the last gradient record at or before warmup_steps)
    alpha_early     layer-0 alpha_tt averaged over the activation records up to the early step
    identity_early  current-token accuracy of a linear decoder at blocks.0.hook_resid_mid at the early step
    growth_early    hidden-norm growth (final resid_post / embedding) at the early step
and, measured at the end, for the record only: identity_end, growth_end.

The test, per feature: the outcome is "collapsed" (the run's own final loss sits at the unigram floor);
a one-feature threshold classifier (the threshold and side that classify the training cells best) is
fitted on all but one run and scored on the one left out, for every run (leave-one-out), with an exact
(Clopper-Pearson) 95% interval on the held-out accuracy, beside the accuracy of always guessing the more
common outcome (a fold's majority would do worse: left out, a run of a balanced grid is always the
minority); and on seeded random half splits (the mean held-out
accuracy). The rank-based AUC (no fitting; 0.5 = no information, either side of 0.5 informs) comes with a
seeded bootstrap 95% interval; it is stored as P(a collapsed run's value > a surviving run's) and written in the
direction it separates (held_out.auc_text: "AUC 0.94 [..], lower values collapse" for a stored 0.06). A feature
"predicts" only when its interval's lower bound is above the majority baseline. Seeded: the same numbers on
every machine (experiments.statistics.held_out).
"""

from __future__ import annotations

import math
from typing import Any

from experiments.statistics.held_out import auc_text, held_out_test, leave_one_out, value_at

EARLY_FEATURES = ("grad0", "grad_warm", "alpha_early", "identity_early", "growth_early")
IDENTITY_SITE = "blocks.0.hook_resid_mid"
IDENTITY_BATCHES = 2  # fixed validation batches the early decoder is scored on (kept small: it runs in training)


class EarlyIdentity:
    """Trainer callback: the current-token decoder at block 0's resid_mid at `step` and at the end of training.

    Appends {"step", "probe": "identity", ...probes.identity.measure_identity(...)} to probes.jsonl, on one site and
    offset 0 only (a fraction of a full identity probe's cost). A resumed run drops records from after its
    checkpoint and writes them again, as every probe's.
    """

    def __init__(self, step: int):
        self.step = step

    def _record(self, trainer, step: int) -> None:
        from probes.identity import measure_identity

        if not getattr(trainer, "is_main", True):
            return
        batches = trainer.val_batches[:IDENTITY_BATCHES]
        result = measure_identity(trainer.model, trainer.corpus.train, batches, offsets=(0,), sites=[IDENTITY_SITE])
        trainer.append("probes.jsonl", {"step": step, "probe": "identity", **result})

    def on_eval(self, trainer, step: int, val_loss: float) -> None:
        if step == self.step and step < trainer.train_cfg.max_steps:
            self._record(trainer, step)

    def on_train_end(self, trainer) -> None:
        self._record(trainer, trainer.train_cfg.max_steps)


# ----- features -----------------------------------------------------------------------------------------


def features(probes: dict[str, list[dict[str, Any]]], warmup: int, early: int) -> dict[str, float | None]:
    """The early features (and identity_end, growth_end) of one run from its probe records; None where absent."""
    grads = [(g["step"], math.hypot(g["attn"][0], g["mlp"][0])) for g in probes.get("gradients", [])]
    attention = [
        (r["step"], r["alpha_tt_layer_mean"][0]) for r in probes.get("attention", []) if r.get("alpha_tt_layer_mean")
    ]
    norms = [(r["step"], r["growth"]) for r in probes.get("norms", [])]
    identity = [(r["step"], r["accuracy"][0][0]) for r in probes.get("identity", [])]
    early_alpha = [a for s, a in attention if s <= early]
    return {
        "grad0": value_at(grads, 0, exact=True),
        "grad_warm": value_at(grads, warmup),
        "alpha_early": sum(early_alpha) / len(early_alpha) if early_alpha else None,
        "identity_early": value_at(identity, early, exact=True),
        "growth_early": value_at(norms, early),
        "identity_end": identity[-1][1] if identity and identity[-1][0] > early else None,
        "growth_end": norms[-1][1] if norms else None,
    }


# ----- the held-out test --------------------------------------------------------------------------------


def evaluate(samples: list[dict[str, Any]], names: tuple[str, ...] = EARLY_FEATURES) -> dict[str, Any]:
    """Each feature's held-out test over samples ({"features", "collapsed"}); a reason instead where untestable."""
    out = {}
    for name in names:
        pairs = [(s["features"][name], s["collapsed"]) for s in samples if s["features"].get(name) is not None]
        xs, ys = [float(x) for x, _ in pairs], [bool(y) for _, y in pairs]
        out[name] = held_out_test(
            xs,
            ys,
            leave_one_out,
            counted="n_collapsed",
            too_few=f"{len(xs)} run(s) with this feature; at least 4 are needed" if len(xs) < 4 else None,
            every_run=("is collapsed", "is not collapsed"),
            names=("loo_accuracy", "loo_interval"),
            splits=True,
            threshold=True,
        )
    return out


def verdict_text(name: str, item: dict[str, Any]) -> str:
    """One line per feature for the console and the report."""
    if "untestable" in item:
        return f"{name}: not testable ({item['untestable']})"
    lo, hi = item["loo_interval"]
    split = f"{item['split_accuracy']:.2f}" if item["split_accuracy"] is not None else "n/a"
    word = "PREDICTS" if item["predicts"] else "does not predict beyond the majority class"
    return (
        f"{name}: {word}: held-out (leave-one-out) accuracy {item['loo_accuracy']:.2f} [{lo:.2f}, {hi:.2f}] "
        f"vs majority {item['majority_accuracy']:.2f}; random halves {split}; {auc_text(item, 'collapse')} "
        f"({item['n']} runs, {item['n_collapsed']} collapsed)"
    )
