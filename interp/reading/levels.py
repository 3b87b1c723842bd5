"""Reference levels: add-one smoothed unigram and pair (e.g. bigram) predictions, counted on a train split.

The one counting behind training.reference_levels (the unigram and bigram
cross-entropy every loss is read against) and the identity probes' levels
(probes.identity: the token at offset k given the current token). Counts are
sparse (sorted pair codes context * V + target), so a 50257-token vocabulary
needs no V x V matrix.
"""

from __future__ import annotations

import numpy as np


def add_one_levels(
    train: np.ndarray,
    contexts: np.ndarray,
    targets: np.ndarray,
    vocab_size: int,
    *,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    accuracy: bool = False,
) -> dict:
    """Cross-entropy (nats, mean) and, with accuracy, the hit rate of each level on `targets`.

    unigram: p(target) = (count + 1) / (len(train) + V), counted on train.
    pair (when pairs = (train_contexts, train_targets), aligned): p(target | context)
        = (count(context, target) + 1) / (count(context) + V); the bigram is
        pairs = (train[:-1], train[1:]). Its guess is the most frequent target after
        the context (the unigram argmax for a context never seen).
    Returns {"unigram": {"ce"[, "accuracy"]}} plus "pair" and "n_pair_types" with pairs.
    """
    train = np.asarray(train, dtype=np.int64)
    counts = np.bincount(train, minlength=vocab_size)
    unigram = {"ce": float(-np.log((counts[targets] + 1) / (len(train) + vocab_size)).mean())}
    if accuracy:
        unigram["accuracy"] = float((targets == counts.argmax()).mean())
    out: dict = {"unigram": unigram}
    if pairs is None:
        return out
    train_contexts, train_targets = pairs
    codes, pair_counts = np.unique(train_contexts * vocab_size + train_targets, return_counts=True)
    context_counts = np.bincount(train_contexts, minlength=vocab_size)
    queries = contexts * vocab_size + targets
    where = np.minimum(np.searchsorted(codes, queries), len(codes) - 1)
    seen = np.where(codes[where] == queries, pair_counts[where], 0)
    pair = {"ce": float(-np.log((seen + 1) / (context_counts[contexts] + vocab_size)).mean())}
    if accuracy:
        # the most frequent target after each context (ties: the smallest id)
        order = np.lexsort((-pair_counts, codes // vocab_size))
        first = np.ones(len(order), dtype=bool)
        first[1:] = (codes[order][1:] // vocab_size) != (codes[order][:-1] // vocab_size)
        guess = np.full(vocab_size, counts.argmax())
        guess[codes[order][first] // vocab_size] = codes[order][first] % vocab_size
        pair["accuracy"] = float((guess[contexts] == targets).mean())
    return {**out, "pair": pair, "n_pair_types": int(len(codes))}


__all__ = ["add_one_levels"]
