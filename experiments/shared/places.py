"""Where a loss sits among the reference levels: the routing test's rule, which the phase diagram and the
interventions read too (each prints it with its table)."""

from __future__ import annotations


def place(loss: float, levels: dict[str, float], full: float | None, margin: float) -> str:
    """Where a loss sits among the reference levels (the rule is printed with the table)."""
    unigram, bigram = levels["unigram"], levels["bigram"]
    if loss >= unigram - margin:
        return "at the unigram floor"
    if abs(loss - bigram) <= margin:
        return "at the bigram level"
    if loss > bigram:
        return "between bigram and floor"
    if full is not None and loss <= full + margin:
        return "near full"
    return "below bigram (uses context)"
