"""The offline report: a window (or several) compared with a reference, as one HTML file.

The numbers are those the service stores for a window (:func:`calmon.services.windows.record.
evaluate_segment` with a fixed reference: metrics, 95% intervals, the prior / likelihood
split, the label-free estimate, the reliability diagram), and the page is the web view's own
(:func:`calmon.ui.pages.model_page` in its standalone form): the same charts, split and verdict,
from the same code. The file loads nothing and runs no script; in Jupyter, :class:`Report`
shows itself inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Final

import numpy as np

from calmon.arrays import FloatArray, Int8Array
from calmon.catalogue import CHART_METRIC
from calmon.metrics.window_evaluation import WindowConfig
from calmon.offline.csv_input import EvaluationRows
from calmon.records import WindowRecord
from calmon.services.windows.record import evaluate_segment
from calmon.services.windows.reference_cache import reference_from_scores
from calmon.timeline import WINDOW_SECONDS, iso, window_length
from calmon.ui.pages import model_page
from calmon.words import plural

#: the web view's second metric by default
DEFAULT_METRIC: Final = CHART_METRIC
#: the bounds periods without timestamps get in their records (which need some), consecutive
#: days ending here; the page never shows them (it numbers such windows)
UNDATED_END: Final = datetime(2000, 1, 1, tzinfo=UTC)
#: the height of the inline frame in a notebook, in CSS pixels
INLINE_HEIGHT: Final = 1400


class ReportError(ValueError):
    """The data cannot make a report (no window besides the reference, no labelled row)."""


@dataclass(frozen=True, slots=True)
class Period:
    """The rows of one period: scores, labels (1, 0, or -1 when not known yet), and its bounds
    ``[start, end)`` (UTC)."""

    scores: FloatArray
    labels: Int8Array
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Report:
    """A finished report: ``html`` is a whole page; ``records`` are its windows' records, as
    the API's ``GET …/windows`` would answer them."""

    html: str
    records: list[WindowRecord]

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (UTF-8) and return that path."""
        target = Path(path)
        target.write_text(self.html, encoding="utf-8")
        return target

    def _repr_html_(self) -> str:
        """Jupyter's inline view: the page in a frame of its own, so that its style sheet
        stays in it."""
        return (
            f'<iframe srcdoc="{escape(self.html)}" title="calmon report" '
            f'style="width:100%;height:{INLINE_HEIGHT}px;border:0"></iframe>'
        )


def compare(
    reference: Period,
    windows: Sequence[Period],
    *,
    threshold: float = 0.5,
    pi0: Sequence[float] = (),
    score_kind: str = "probability",
) -> list[WindowRecord]:
    """The record of each of ``windows`` against ``reference`` (a fixed reference), computed
    as the scheduler computes a stored window."""
    config = WindowConfig(
        threshold=float(threshold), score_kind=score_kind, pi0=tuple(float(p) for p in pi0)
    )
    labelled = reference.labels >= 0
    if not labelled.any():
        raise ReportError("the reference has no labelled row")
    built = reference_from_scores(
        config=config,
        pos_sorted=np.sort(reference.scores[reference.labels == 1]),
        neg_sorted=np.sort(reference.scores[reference.labels == 0]),
        start=reference.start,
        end=reference.end,
    )
    computed_at = datetime.now(UTC)
    return [
        evaluate_segment(
            config=config,
            segment="*",
            start=window.start,
            end=window.end,
            scores=window.scores,
            labels=window.labels,
            reference=built,
            computed_at=computed_at,
        )[0]
        for window in windows
    ]


def render(
    records: Sequence[WindowRecord],
    *,
    title: str,
    introduction: str,
    metric: str = DEFAULT_METRIC,
    dated: bool = True,
) -> str:
    """The web view's model page over ``records``, standalone, with ``introduction`` (plain
    text) under the title; windows not ``dated`` are named by their position."""
    return model_page(
        name=title,
        window="",
        segment="*",
        segments=["*"],
        metric=metric,
        metrics=[metric],
        records=records,
        selected=None,
        model_alerts=(),
        standalone=f"<p>{escape(introduction)}</p>",
        numbered=not dated,
    )


def build(
    reference: Period,
    windows: Sequence[Period],
    *,
    threshold: float = 0.5,
    pi0: Sequence[float] = (),
    score_kind: str = "probability",
    title: str = "calmon report",
    note: str = "",
    dated: bool = True,
) -> Report:
    """Compare ``windows`` with ``reference`` and render the page; periods not ``dated`` (rows
    without timestamps, bounds from :func:`undated`) are numbered on it, never dated."""
    if not windows:
        raise ReportError("nothing to compare with the reference: no window after it")
    records = compare(reference, windows, threshold=threshold, pi0=pi0, score_kind=score_kind)
    span = f" {iso(reference.start)} to {iso(reference.end)}" if dated else ""
    introduction = (
        f"Reference{span}: {plural(reference.scores.size, 'prediction')}; "
        f"{plural(len(windows), 'window')} compared with it at threshold {threshold:g}. {note}"
    ).strip()
    html = render(records, title=title, introduction=introduction, dated=dated)
    return Report(html=html, records=records)


def undated(count: int) -> list[tuple[datetime, datetime]]:
    """Bounds of ``count`` periods without timestamps, for their records (which need bounds):
    consecutive days ending at :data:`UNDATED_END`, the reference first. Pass ``dated=False``
    to :func:`build` with them, so the page numbers the windows instead of showing these."""
    day = timedelta(days=1)
    first = UNDATED_END - count * day
    return [(first + i * day, first + (i + 1) * day) for i in range(count)]


def report_from_rows(
    rows: EvaluationRows,
    *,
    window: str | None,
    threshold: float,
    pi0: Sequence[float],
    score_kind: str,
    title: str,
) -> Report:
    """The report of a file of `calmon evaluate`: with ``window``, its first window is the
    reference and every later one is compared with it; without, the whole file is one
    window compared with itself as a reference would be (its verdict says "neither"), named
    by its number, not dated."""
    if window is None:
        (start, end), (w_start, w_end) = undated(2)
        whole = Period(rows.scores, rows.labels, start, end)
        windowed = [Period(rows.scores, rows.labels, w_start, w_end)]
        note = "Without --window the whole file is both the reference and the window."
        return build(
            whole,
            windowed,
            threshold=threshold,
            pi0=pi0,
            score_kind=score_kind,
            title=title,
            note=note,
            dated=False,
        )
    assert rows.timestamps is not None
    seconds = WINDOW_SECONDS[window]
    keys = np.floor_divide(rows.timestamps, seconds).astype(np.int64)
    periods = []
    for key in np.unique(keys).tolist():
        chosen = keys == key
        start = datetime.fromtimestamp(key * seconds, tz=UTC)
        periods.append(
            Period(rows.scores[chosen], rows.labels[chosen], start, start + window_length(window))
        )
    return build(
        periods[0],
        periods[1:],
        threshold=threshold,
        pi0=pi0,
        score_kind=score_kind,
        title=title,
        note=f"The first {window} window is the reference.",
    )
