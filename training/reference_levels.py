"""The two numbers every result is read against, from the train split's counts.

The unigram cross-entropy (a model that knows nothing, where the collapsed configs sit) and the bigram
cross-entropy (the best any model without cross-position mixing can do), add-one smoothed (interp.reading.levels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from interp.errors import DataError
from interp.reading.levels import add_one_levels
from training.batches import check_positive, fixed_batches


def _as_ids(values: Any) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _reference_levels(train: np.ndarray, contexts: np.ndarray, targets: np.ndarray, vocab_size: int) -> dict:
    """Add-one smoothed unigram and bigram cross-entropies (nats) of targets, counted on train."""
    check_positive(vocab_size=vocab_size)
    train = _as_ids(train)
    if len(train) < 2:
        raise DataError(f"the train split has {len(train)} tokens; reference levels need at least 2")
    if len(targets) == 0:
        raise DataError("no target tokens to score")
    for ids, what in ((train, "the train split"), (contexts, "the contexts"), (targets, "the targets")):
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise DataError(f"{what} holds ids outside [0, {vocab_size})")

    levels = add_one_levels(train, contexts, targets, vocab_size, pairs=(train[:-1], train[1:]))
    return {
        "unigram": levels["unigram"]["ce"],
        "bigram": levels["pair"]["ce"],
        "n_targets": int(len(targets)),
        "n_train_tokens": int(len(train)),
        "n_bigram_types": levels["n_pair_types"],
        "vocab_size": int(vocab_size),
        "smoothing": "add-one",
    }


def reference_levels(train: np.ndarray, batches: Sequence[tuple[Any, Any]], vocab_size: int) -> dict:
    """Unigram / bigram cross-entropy (nats, mean over every target in batches) from train-split counts.

    The bigram model sees only the current token: target y[b, t] is scored given x[b, t].
    """
    if not batches:
        raise DataError("no batches to score")
    contexts = np.concatenate([_as_ids(x) for x, _ in batches])
    targets = np.concatenate([_as_ids(y) for _, y in batches])
    if contexts.shape != targets.shape:
        raise DataError(f"batch inputs ({contexts.size} ids) and targets ({targets.size} ids) differ in size")
    return _reference_levels(train, contexts, targets, vocab_size)


def reference_levels_split(train: np.ndarray, val: np.ndarray, vocab_size: int) -> dict:
    """The same levels over a whole split: every val token after the first, given the one before it."""
    val = _as_ids(val)
    return _reference_levels(train, val[:-1], val[1:], vocab_size)


def validation_levels(n_ctx: int, train_cfg: Any, corpus: Any) -> dict:
    """The levels every command prints: reference_levels on the run's fixed validation batches
    (training.batches.fixed_batches with the config's batch size and evaluation batches)."""
    batches = fixed_batches(corpus.val, n_ctx, train_cfg.batch_size, train_cfg.eval_batches)
    return reference_levels(corpus.train, batches, corpus.vocab_size)
