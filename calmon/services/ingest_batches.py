"""A validated prediction batch, column by column: the one form ingestion stores.

A JSON body's validated items (:func:`prediction_columns`) and an Arrow stream's columns
(:mod:`calmon.services.ingest_arrow`) both end here, and from here in the stage table through
one binary ``COPY`` (PostgreSQL) or one ``executemany`` (SQLite): see
:func:`calmon.db.ingest_statements.load_stage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from operator import itemgetter, methodcaller

import numpy as np
import numpy.typing as npt

from calmon.db.stage_columns import NumberColumn, StageColumn, TextColumn, timestamps
from calmon.services.ingest_schemas import (
    LabelIn,
    PredictionIn,
    PredictionRow,
    ProbabilityPredictionIn,
)
from calmon.timeline import EPOCH

_MICROSECOND = timedelta(microseconds=1)
_DAY_US = 86_400 * 1_000_000


@dataclass(frozen=True, slots=True)
class PredictionColumns:
    """Predictions of one batch as columns: ids, event times (microseconds since the Unix
    epoch, UTC), scores, labels (``label_valid`` False: none) and segments (null: none)."""

    ids: TextColumn
    ts_us: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    labels: npt.NDArray[np.int16]
    label_valid: npt.NDArray[np.bool_] | None
    segments: TextColumn

    def __len__(self) -> int:
        return len(self.ts_us)

    def stage(self) -> list[StageColumn]:
        """The columns of the prediction stage table, in its order."""
        return [
            self.ids,
            NumberColumn(self.ts_us),
            NumberColumn(self.scores),
            NumberColumn(self.labels, self.label_valid),
            self.segments,
        ]

    def rows(self) -> list[PredictionRow]:
        """The batch as rows of Python values (messages, tests)."""
        labels: list[int | None] = self.labels.tolist()
        if self.label_valid is not None:
            valid = self.label_valid.tolist()
            labels = [label if ok else None for label, ok in zip(labels, valid, strict=True)]
        ids = self.ids.values()
        return list(
            zip(
                [str(client_id) for client_id in ids],
                timestamps(self.ts_us),
                self.scores.tolist(),
                labels,
                self.segments.values(),
                strict=True,
            )
        )

    def bounds(self) -> tuple[datetime, datetime]:
        """The earliest and the latest event time (a batch of at least one)."""
        lo, hi = int(self.ts_us.min()), int(self.ts_us.max())
        return EPOCH + lo * _MICROSECOND, EPOCH + hi * _MICROSECOND

    def days(self) -> set[date]:
        """The UTC days of the event times."""
        first = EPOCH.date()
        return {first + timedelta(days=d) for d in np.unique(self.ts_us // _DAY_US).tolist()}

    @classmethod
    def of_rows(cls, rows: Sequence[PredictionRow]) -> PredictionColumns:
        """The columns of ``rows`` (event times aware)."""
        if not rows:
            return cls.of_values([], [], [], [], [])
        ids, stamps, scores, labels, segments = zip(*rows, strict=True)
        return cls.of_values(ids, stamps, scores, labels, segments)

    @classmethod
    def of_values(
        cls,
        ids: Sequence[str],
        stamps: Sequence[datetime],
        scores: Sequence[float],
        labels: Sequence[int | None],
        segments: Sequence[str | None],
    ) -> PredictionColumns:
        """The columns of the values of each field (event times aware, between the epoch and
        a day past the server's clock, as validation keeps them)."""
        label_valid = None
        if None in labels:
            floats = np.array(labels, np.float64)
            label_valid = ~np.isnan(floats)
            label_values = np.where(label_valid, floats, 0).astype(np.int16)
        else:
            label_values = np.array(labels, np.int16)
        # POSIX seconds as a float64 are within a quarter microsecond of the instant until the
        # 22nd century (past any time validation lets through): rounding recovers it exactly
        seconds = np.fromiter(map(datetime.timestamp, stamps), np.float64, len(stamps))
        return cls(
            ids=TextColumn.of(ids),
            ts_us=np.rint(seconds * 1e6).astype(np.int64),
            scores=np.array(scores, np.float64),
            labels=label_values,
            label_valid=label_valid,
            segments=TextColumn.of(segments),
        )


def prediction_columns(
    items: Sequence[PredictionIn] | Sequence[ProbabilityPredictionIn],
) -> PredictionColumns:
    """The columns of validated request items."""
    return PredictionColumns.of_values(
        list(map(itemgetter("id"), items)),
        list(map(itemgetter("timestamp"), items)),
        list(map(itemgetter("score"), items)),
        list(map(methodcaller("get", "label"), items)),
        list(map(methodcaller("get", "segment"), items)),
    )


@dataclass(frozen=True, slots=True)
class LabelColumns:
    """Labels of one batch as columns, one row per distinct id (the last label sent for an
    id wins): ids and labels (0 or 1)."""

    ids: TextColumn
    labels: npt.NDArray[np.int16]

    def __len__(self) -> int:
        return len(self.labels)

    def stage(self) -> list[StageColumn]:
        """The columns of the label stage table, in its order."""
        return [self.ids, NumberColumn(self.labels)]

    @classmethod
    def of_items(cls, labels: Sequence[LabelIn]) -> LabelColumns:
        """The columns of validated request items (each id's last label)."""
        latest = {item["id"]: item["label"] for item in labels}
        return cls(TextColumn.of(list(latest)), np.array(list(latest.values()), np.int16))
