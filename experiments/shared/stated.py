"""A prediction as it was written before the runs: its id, title, claim and rule, which every verdict repeats;
and the outcome its decide function reads (StatedOutcome)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StatedOutcome:
    """What a decide function sees: per-variant summaries, the two levels and the margin."""

    variants: dict[str, Any]
    unigram: float
    bigram: float
    margin: float


@dataclass(frozen=True)
class Stated:
    id: str
    title: str
    prediction: str
    rule: str  # "{m}" stands for the margin

    def stated(self, margin: float, **more: Any) -> dict[str, Any]:
        """The verdict's opening fields: the prediction as stated, its rule at this margin, then `more`."""
        return dict(id=self.id, title=self.title, prediction=self.prediction, rule=self.rule.format(m=margin), **more)
