"""A pooled evaluation set built from sorted parts: every positive at once, then the
negatives part by part, without concatenating them (a reference of many windows, or a
decision's trailing windows)."""

from __future__ import annotations

from typing import Final

import numpy as np

from calmon.arrays import FloatArray
from calmon.metrics.evaluation import SetSums, set_sums
from calmon.metrics.ranking import Ranking, RankingAccumulator

_EMPTY: Final = np.empty(0, dtype=np.float64)


class Pool:
    """Accumulates one pooled set: all positives first (ascending, (P,)), then ascending parts
    of the negatives; its ranking and its threshold sums are those of the concatenated set."""

    def __init__(self, pos_sorted: FloatArray, *, threshold: float, score_kind: str) -> None:
        self._threshold = threshold
        self._score_kind = score_kind
        self._ranking = RankingAccumulator(pos_sorted)
        self.sums: SetSums = set_sums(
            pos_sorted, _EMPTY, threshold=threshold, score_kind=score_kind
        )

    def add_negatives(self, neg_sorted: FloatArray) -> None:
        """Count one ascending part of the negatives."""
        self._ranking.add_negatives(neg_sorted)
        self.sums = self.sums + set_sums(
            _EMPTY, neg_sorted, threshold=self._threshold, score_kind=self._score_kind
        )

    def ranking(self) -> Ranking:
        """The pooled ranking so far."""
        return self._ranking.ranking()
