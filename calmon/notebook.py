"""calmon in a notebook: evaluate a data frame by column names, and compare a window with a
reference in the web view's HTML report. The package root re-exports both functions
(``from calmon import evaluate_frame, report``); this module is their one home.

A frame is anything that gives a column by name (``frame["score"]``) as something with
``to_numpy()`` (a pandas or polars data frame) or that NumPy can read (a dict of lists or
arrays). pandas is an optional extra (``pip install 'calmon[notebook]'``), never imported
here. A missing label (``None``, NaN, ``pd.NA``, a polars null) marks a prediction whose
label is not known yet: it counts in ``unlabelled`` and in the label-free estimate only.

    >>> from calmon import evaluate_frame, report
    >>> evaluate_frame(df, score="proba", label="is_fraud", pi0=[0.01])["regular"]["roc_auc"]
    >>> report(last_month, this_week, score="proba", label="is_fraud").save("report.html")

In Jupyter the value of ``report(...)`` shows the report inline. ``docs/reference/notebook.md``
shows a session.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from calmon.arrays import FloatArray, Int8Array
from calmon.metrics.prepared import ScoreKind
from calmon.offline.csv_input import UNLABELLED, EvaluationRows
from calmon.offline.grouping import split_rows
from calmon.offline.html_report import DEFAULT_METRIC, Period, Report, build, undated
from calmon.offline.report import evaluate_group
from calmon.records import EvaluationRecord

#: the bootstrap's seed unless told otherwise, as `calmon evaluate --seed`'s
DEFAULT_SEED = 0


class Frame(Protocol):
    """What a frame must offer: a column by name."""

    def __getitem__(self, column: str, /) -> Any: ...


def column(frame: Frame, name: str, *, numeric: bool = False) -> np.ndarray[Any, Any]:
    """The column ``name`` of ``frame`` as a NumPy array; a KeyError names the columns there
    are when there is no such column. ``numeric``: a pandas column comes as float64 with NaN
    for a missing value (``pd.NA`` of a nullable dtype), when it converts."""
    try:
        values = frame[name]
    except (KeyError, IndexError, ValueError):
        known = getattr(frame, "columns", None)
        if known is None and isinstance(frame, dict):
            known = list(frame)
        shown = "" if known is None else f"; the columns are {', '.join(map(str, known))}"
        raise KeyError(f"no column {name!r}{shown}") from None
    to_numpy = getattr(values, "to_numpy", None)
    if not callable(to_numpy):
        return np.asarray(values)
    if numeric:
        try:  # pandas' signature; polars gives NaN for nulls of a number column by itself
            return np.asarray(to_numpy(dtype=np.float64, na_value=np.nan))
        except (TypeError, ValueError):
            pass
    return np.asarray(to_numpy())


def scores_and_labels(frame: Frame, *, score: str, label: str) -> tuple[FloatArray, Int8Array]:
    """The scores (float64) and labels of ``frame``: 1, 0, or -1 where the label is missing.
    A label other than 0, 1 or missing, or a score that is not a finite number, is a
    ValueError that says which row."""
    scores = column(frame, score, numeric=True).astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        raise ValueError(
            f"score of row {int(bad[0])} is not a finite number: {float(scores[bad[0]])}"
        )
    raw = column(frame, label, numeric=True)
    if raw.dtype.kind in "fiub":
        values = raw.astype(np.float64)
    else:
        values = np.array([_label_number(v) for v in raw.tolist()], dtype=np.float64)
    missing = np.isnan(values)
    known = values[~missing]
    wrong = np.flatnonzero(~missing)[(known != 0) & (known != 1)]
    if wrong.size:
        shown = raw[wrong[0]].item() if isinstance(raw[wrong[0]], np.generic) else raw[wrong[0]]
        raise ValueError(f"label of row {int(wrong[0])} is not 0, 1 or missing: {shown!r}")
    labels = np.where(missing, UNLABELLED, values).astype(np.int8)
    return scores, labels


def _label_number(value: object) -> float:
    """A label value as a number: NaN when missing (None, NaN), inf (never a label) when it
    is not a number, so that the caller reports its row."""
    if value is None:
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.inf


def evaluate_frame(
    frame: Frame,
    *,
    score: str = "score",
    label: str = "label",
    threshold: float = 0.5,
    pi0: Sequence[float] = (),
    score_kind: ScoreKind = "probability",
    intervals: bool = False,
    seed: int = DEFAULT_SEED,
) -> EvaluationRecord:
    """Every metric of ``docs/reference/metrics.md`` for the rows of ``frame`` (columns ``score``
    and ``label``): the record ``calmon evaluate --format json`` gives for a file of these rows
    (:class:`calmon.records.EvaluationRecord`, ``segment`` ``*``, no window). Rows whose
    label is missing only count in ``unlabelled``."""
    scores, labels = scores_and_labels(frame, score=score, label=label)
    rows = EvaluationRows(
        scores=scores, labels=labels, timestamps=None, segment_names=None, segment_codes=None
    )
    (group,) = split_rows(rows, window=None, by_segment=False)
    return evaluate_group(
        group,
        threshold=threshold,
        pi0=pi0,
        score_kind=score_kind,
        intervals=intervals,
        seed=seed,
    )


def _bounds(frame: Frame, timestamp: str | None) -> tuple[datetime, datetime] | None:
    """The first and last instant of ``frame``'s ``timestamp`` column (UTC), or None. Its
    values are ``datetime64`` (UTC), datetimes (those without a time zone read as UTC, as
    ``datetime64`` is) or ISO 8601 text."""
    if timestamp is None:
        return None
    values = column(frame, timestamp)
    if np.issubdtype(values.dtype, np.datetime64):
        seconds = values.astype("datetime64[us]").astype(np.int64) / 1e6
    else:
        moments = [
            v if isinstance(v, datetime) else datetime.fromisoformat(str(v))
            for v in values.tolist()
        ]
        seconds = np.array(
            [(m if m.tzinfo is not None else m.replace(tzinfo=UTC)).timestamp() for m in moments]
        )
    return (
        datetime.fromtimestamp(float(seconds.min()), tz=UTC),
        datetime.fromtimestamp(float(seconds.max()), tz=UTC),
    )


def report(
    reference: Frame,
    window: Frame,
    *,
    score: str = "score",
    label: str = "label",
    timestamp: str | None = None,
    threshold: float = 0.5,
    pi0: Sequence[float] = (),
    score_kind: ScoreKind = "probability",
    title: str = "calmon report",
    path: str | None = None,
) -> Report:
    """Compare ``window`` with ``reference`` as the service compares a window with a fixed
    reference, and render the web view's page: the charts, the prior / likelihood split of
    the change and the verdict. ``timestamp`` names a column that dates the rows (else the
    page numbers the window instead of dating it); with ``path`` the page is also written there.
    """
    ref_scores, ref_labels = scores_and_labels(reference, score=score, label=label)
    win_scores, win_labels = scores_and_labels(window, score=score, label=label)
    ref_bounds, win_bounds = _bounds(reference, timestamp), _bounds(window, timestamp)
    if ref_bounds is None or win_bounds is None:
        (ref_start, ref_end), (win_start, win_end) = undated(2)
        note, dated = "No timestamps: the window is numbered, not dated.", False
    else:
        (ref_start, ref_end), (win_start, win_end) = ref_bounds, win_bounds
        note, dated = "", True
    built = build(
        Period(ref_scores, ref_labels, ref_start, ref_end),
        [Period(win_scores, win_labels, win_start, win_end)],
        threshold=threshold,
        pi0=pi0,
        score_kind=score_kind,
        title=title,
        note=note,
        dated=dated,
    )
    if path is not None:
        built.save(path)
    return built


__all__ = ["DEFAULT_METRIC", "DEFAULT_SEED", "Report", "evaluate_frame", "report"]
