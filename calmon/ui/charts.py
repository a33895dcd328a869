"""Charts as inline SVG text, built from plain numbers (no browser script, no asset).

Each chart is one ``<svg role="img">`` with a ``<title>`` and a ``<desc>``, labelled axes and
a legend drawn in the picture, so that it reads without colour names. A series is one
``<path>`` for its line (gaps where a value is None), one for its 95% band (a closed outline
per run of defined intervals) and, when there are few windows, one for its markers: the SVG
size grows with the number of windows but the element count does not, which keeps a page of
500 windows light for the browser.

Colours come from CSS classes (``s0`` … ``s4``, ``ref``) that the page's style sheet defines.
A point stands at its window's start, as the tables list windows; axis titles are words with
their unit (:func:`metric_title`), and the time axis shows the date wherever the day changes.
The legend draws each entry as the chart does: its band, its line (dashed or dotted alike)
and its marker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Final

from calmon.catalogue import METRICS
from calmon.records import ReliabilityBin
from calmon.words import plural

WIDTH: Final = 1140
HEIGHT: Final = 280
LEFT: Final = 64
RIGHT: Final = 16
TOP: Final = 14
BOTTOM: Final = 58
#: at most this many windows get a marker each (beyond, the line alone reads better)
MARKER_LIMIT: Final = 120
MARKER_RADIUS: Final = 2.6
#: the half width (pixels) of a lone 95% interval, drawn as a box around its point
LONE_HALF: Final = 7.0
#: what stands for an absent value, and the minus sign of negative numbers
DASH: Final = "\u2013"
MINUS: Final = "\u2212"
#: the title of every time axis: points stand at their window's start
TIME_AXIS: Final = "window start (UTC)"
#: the axis of windows without dates, named by their position
NUMBER_AXIS: Final = "window"
#: the dash pattern of a dashed series (levels are dotted by the style sheet)
DASHES: Final = "6 4"
#: axis titles of the metrics, with their scale (``docs/reference/metrics.md``)
METRIC_TITLES: Final[dict[str, str]] = {metric.name: metric.title for metric in METRICS}
#: what a metric is called in legends and headings
METRIC_NAMES: Final[dict[str, str]] = {metric.name: metric.short for metric in METRICS}

Bounds = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Series:
    """One line over the windows, with an optional 95% band; ``css`` picks its colour class."""

    label: str
    values: Sequence[float | None]
    css: str
    bands: Sequence[Bounds | None] | None = None
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Level:
    """A horizontal reference line (and optional shaded band) across the chart."""

    label: str
    value: float
    css: str = "ref"
    band: Bounds | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """Where data coordinates land on the picture."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float
    width: float = WIDTH
    height: float = HEIGHT
    plot: tuple[float, float, float, float] = field(
        default=(LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    )

    def x(self, value: float) -> float:
        """Picture x of data x."""
        left, _, right, _ = self.plot
        span = self.x_max - self.x_min or 1.0
        return left + (value - self.x_min) / span * (right - left)

    def y(self, value: float) -> float:
        """Picture y of data y (clipped to the plot so that outliers stay on the edge)."""
        _, top, _, bottom = self.plot
        span = self.y_max - self.y_min or 1.0
        y = bottom - (value - self.y_min) / span * (bottom - top)
        return top if y < top else bottom if y > bottom else y


def metric_title(metric: str) -> str:
    """The axis title of ``metric``: its name in words with its scale (the field name for a
    metric this module does not know)."""
    return METRIC_TITLES.get(metric, metric)


def metric_name(metric: str) -> str:
    """The short name of ``metric`` for legends and headings."""
    return METRIC_NAMES.get(metric, metric)


def _f(value: float) -> str:
    """A coordinate with one decimal, the precision a screen needs."""
    return f"{value:.1f}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values within ``[low, high]``, in steps of 1, 2 or 5 times a
    power of 10."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda s: abs(math.log(s / raw)))
    first = math.ceil(low / step - 1e-9) * step
    ticks: list[float] = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def format_number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, a true minus sign, or an en dash when absent."""
    if value is None:
        return DASH
    text = f"{value:.{digits}f}"
    if float(text) == 0.0:
        return text.lstrip("-")
    return text.replace("-", MINUS)


def signed(value: float | None, digits: int = 3) -> str:
    """Like :func:`format_number` with an explicit + for positive values."""
    if value is None:
        return DASH
    return ("+" if value > 0 else "") + format_number(value, digits)


def time_labels(ticks: Sequence[float], span: float) -> list[str]:
    """The labels of ``ticks`` (Unix seconds, ascending) over a ``span`` of seconds: the time
    of day, with the date on the first tick and wherever the day changes; dates alone over
    long spans."""
    labels: list[str] = []
    previous: str | None = None
    for seconds in ticks:
        moment = datetime.fromtimestamp(seconds, tz=UTC)
        day = moment.strftime("%Y-%m-%d")
        if span > 20 * 86_400:
            labels.append(day)
        elif day != previous:
            labels.append(f"{moment:%b} {moment.day} {moment:%H:%M}")
        else:
            labels.append(moment.strftime("%H:%M"))
        previous = day
    return labels


def time_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Tick instants (Unix seconds) at round steps between ``low`` and ``high``."""
    steps = (60, 300, 900, 1800, 3600, 7200, 21_600, 43_200, 86_400, 172_800, 604_800)
    span = max(high - low, 1.0)
    step = next((s for s in steps if span / s <= count), None)
    if step is None:
        step = math.ceil(span / count / 604_800) * 604_800
    first = math.ceil(low / step) * step
    return [float(t) for t in range(int(first), int(high) + 1, step)]


def _line(frame: Frame, xs: Sequence[float], values: Sequence[float | None]) -> str:
    parts: list[str] = []
    pen_down = False
    fx, fy = frame.x, frame.y
    for x, v in zip(xs, values, strict=True):
        if v is None:
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{fx(x):.1f} {fy(v):.1f}")
        pen_down = True
    return "".join(parts)


def _band(frame: Frame, xs: Sequence[float], bands: Sequence[Bounds | None], half: float) -> str:
    """Closed outlines, one per run of defined intervals; a lone interval is a box ``2·half``
    pixels wide around its point, so that it shows without reaching over the time axis."""
    runs: list[list[tuple[float, Bounds]]] = [[]]
    for x, b in zip(xs, bands, strict=True):
        if b is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((frame.x(x), b))
    parts: list[str] = []
    for run in runs:
        if not run:
            continue
        if len(run) == 1:
            ((px, (lo, hi)),) = run
            run = [(px - half, (lo, hi)), (px + half, (lo, hi))]
        upper = "L".join(f"{_f(px)} {_f(frame.y(hi))}" for px, (_, hi) in run)
        lower = "L".join(f"{_f(px)} {_f(frame.y(lo))}" for px, (lo, _) in reversed(run))
        parts.append(f"M{upper}L{lower}Z")
    return "".join(parts)


def _markers(frame: Frame, xs: Sequence[float], values: Sequence[float | None]) -> str:
    r = MARKER_RADIUS
    return "".join(
        f"M{_f(frame.x(x) - r)} {_f(frame.y(v))}a{r} {r} 0 1 0 {2 * r} 0a{r} {r} 0 1 0 {-2 * r} 0"
        for x, v in zip(xs, values, strict=True)
        if v is not None
    )


def _extent(series: Sequence[Series], levels: Sequence[Level]) -> tuple[float, float] | None:
    found: list[float] = [level.value for level in levels]
    for level in levels:
        if level.band is not None:
            found.extend(level.band)
    for s in series:
        found.extend(v for v in s.values if v is not None)
        for b in s.bands or ():
            if b is not None:
                found.extend(b)
    finite = [v for v in found if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else None


@dataclass(frozen=True, slots=True)
class Entry:
    """One legend entry, drawn as the chart draws it: ``kind`` is ``line`` (a series) or
    ``level`` (dotted by the style sheet); a series may be dashed, have a band and markers."""

    label: str
    css: str
    kind: str = "line"
    dashed: bool = False
    band: bool = False
    marker: bool = False


def _legend(entries: Sequence[Entry], frame: Frame) -> str:
    """Legend entries in a row under the x axis labels, each swatch 24 px wide."""
    x, y = frame.plot[0], frame.height - 8
    out: list[str] = ['<g class="legend">']
    for entry in entries:
        if entry.band:
            out.append(f'<path class="band {entry.css}" d="M{_f(x)} {_f(y - 10)}h24v12h-24Z"/>')
        dash = f' stroke-dasharray="{DASHES}"' if entry.dashed else ""
        out.append(f'<path class="{entry.kind} {entry.css}"{dash} d="M{_f(x)} {_f(y - 4)}h24"/>')
        if entry.marker:
            out.append(
                f'<circle class="mark {entry.css}" cx="{_f(x + 12)}" cy="{_f(y - 4)}" r="3"/>'
            )
        out.append(f'<text x="{_f(x + 30)}" y="{_f(y)}">{escape(entry.label)}</text>')
        x += 44 + 6.6 * len(entry.label)
    out.append("</g>")
    return "".join(out)


def _frame_svg(
    frame: Frame,
    *,
    title: str,
    desc: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    y_ticks: Sequence[tuple[float, str]],
    x_label: str,
    chart_id: str,
    square: bool = False,
) -> list[str]:
    """The opening of a chart: accessible name, grid, axes and their labels. A time chart
    takes the page's width (class ``chart wide``), a ``square`` one keeps its size."""
    left, top, right, bottom = frame.plot
    kind = "chart" if square else "chart wide"
    out = [
        f'<svg class="{kind}" id="{escape(chart_id)}" role="img" viewBox="0 0 {frame.width} '
        f'{frame.height}" width="{frame.width}" height="{frame.height}" '
        f'aria-labelledby="{escape(chart_id)}-t {escape(chart_id)}-d">'
        f'<title id="{escape(chart_id)}-t">{escape(title)}</title>'
        f'<desc id="{escape(chart_id)}-d">{escape(desc)}</desc>',
        '<g class="grid">',
    ]
    for value, text in y_ticks:
        y = frame.y(value)
        out.append(
            f'<path d="M{_f(left)} {_f(y)}H{_f(right)}"/>'
            f'<text class="tick" x="{_f(left - 6)}" y="{_f(y + 4)}" text-anchor="end">'
            f"{escape(text)}</text>"
        )
    for value, text in x_ticks:
        x = frame.x(value)
        out.append(
            f'<path d="M{_f(x)} {_f(bottom)}v5"/>'
            f'<text class="tick" x="{_f(x)}" y="{_f(bottom + 17)}" text-anchor="middle">'
            f"{escape(text)}</text>"
        )
    out.append("</g>")
    out.append(f'<path class="axis" d="M{_f(left)} {_f(top)}V{_f(bottom)}H{_f(right)}"/>')
    middle = (top + bottom) / 2
    out.append(
        f'<text class="label" transform="translate(14 {_f(middle)}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    out.append(
        f'<text class="label" x="{_f(right)}" y="{_f(bottom + 34)}" '
        f'text-anchor="end">{escape(x_label)}</text>'
    )
    return out


def time_chart(
    *,
    chart_id: str,
    title: str,
    desc: str,
    y_label: str,
    times: Sequence[float],
    series: Sequence[Series],
    levels: Sequence[Level] = (),
    y_range: Bounds | None = None,
    half_window: float = 0.0,
    numbered: bool = False,
) -> str:
    """A chart over window starts ``times`` (Unix seconds, ascending; the axis reaches
    ``half_window`` seconds beyond the first and last): each series' band, line and (for few
    windows) markers, the reference ``levels``, with the y range fitted to the data unless
    ``y_range`` is given. A lone interval (no neighbour to join) is a narrow box around its
    point. An empty chart says "no data" in its picture. ``numbered``: ``times`` are window
    positions (1, 2, …; windows without dates), and the axis counts windows."""
    extent = y_range or _extent(series, levels)
    if not times or extent is None:
        return _empty_time_chart(chart_id=chart_id, title=title, desc=desc, y_label=y_label)
    frame, y_ticks, x_ticks = _time_frame(
        times, extent, fitted=not y_range, half=half_window, numbered=numbered
    )
    out = _frame_svg(
        frame,
        title=title,
        desc=desc,
        y_label=y_label,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        x_label=NUMBER_AXIS if numbered else TIME_AXIS,
        chart_id=chart_id,
    )
    out += _level_paths(frame, levels)
    out += _series_bands(frame, times, series)
    lines, entries = _series_lines(frame, times, series)
    out += lines
    entries += [
        Entry(level.label, level.css, kind="level", band=level.band is not None) for level in levels
    ]
    out.append(_legend(entries, frame))
    out.append("</svg>")
    return "".join(out)


def _empty_time_chart(*, chart_id: str, title: str, desc: str, y_label: str) -> str:
    """A time chart without data: the titled frame with no ticks and "no data" in the middle,
    so that the page keeps its layout and says why the picture is blank."""
    frame = Frame(0.0, 1.0, 0.0, 1.0)
    body = _frame_svg(
        frame,
        title=title,
        desc=desc,
        y_label=y_label,
        x_ticks=[],
        y_ticks=[],
        x_label=TIME_AXIS,
        chart_id=chart_id,
    )
    body.append(
        f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">'
        "no data</text></svg>"
    )
    return "".join(body)


def _time_frame(
    times: Sequence[float], extent: Bounds, *, fitted: bool, half: float, numbered: bool
) -> tuple[Frame, list[tuple[float, str]], list[tuple[float, str]]]:
    """The frame of a time chart and its y and x ticks. A flat ``extent`` is widened so the
    line sits mid-height; a ``fitted`` range (not given by the caller) gets 4% padding, and
    the time axis reaches ``half`` seconds beyond the first and last window start (``half`` a
    step beyond the first and last position when ``numbered``, with a tick per position, or
    every few over many)."""
    low, high = extent
    if high - low < 1e-9:
        low, high = low - 0.05, high + 0.05
    pad = 0.04 * (high - low) if fitted else 0.0
    x_min, x_max = times[0] - half, times[-1] + half
    frame = Frame(x_min, x_max, low - pad, high + pad)
    y_ticks = [
        (t, format_number(t, _digits(high - low))) for t in nice_ticks(low - pad, high + pad)
    ]
    y_ticks = [(t, s) for t, s in y_ticks if frame.y_min <= t <= frame.y_max]
    if numbered:
        step = max(1, math.ceil(len(times) / 10))
        x_ticks = [(t, f"{t:g}") for t in times[::step]]
    else:
        ticks = time_ticks(x_min, x_max)
        x_ticks = list(zip(ticks, time_labels(ticks, x_max - x_min), strict=True))
    return frame, y_ticks, x_ticks


def _level_paths(frame: Frame, levels: Sequence[Level]) -> list[str]:
    """Each reference level as a horizontal line across the plot, over its band if it has
    one; drawn first so that the series lie on top of them."""
    left, _, right, _ = frame.plot
    out: list[str] = []
    for level in levels:
        if level.band is not None:
            lo, hi = frame.y(level.band[0]), frame.y(level.band[1])
            out.append(
                f'<path class="band {level.css}" d="M{_f(left)} {_f(hi)}H{_f(right)}'
                f'V{_f(lo)}H{_f(left)}Z"/>'
            )
        y = frame.y(level.value)
        out.append(f'<path class="level {level.css}" d="M{_f(left)} {_f(y)}H{_f(right)}"/>')
    return out


def _series_bands(frame: Frame, times: Sequence[float], series: Sequence[Series]) -> list[str]:
    """The 95% bands of every series, all before any line so that no band hides a line."""
    out: list[str] = []
    for s in series:
        if s.bands is not None:
            band = _band(frame, times, s.bands, LONE_HALF)
            if band:
                out.append(f'<path class="band {s.css}" d="{band}"/>')
    return out


def _series_lines(
    frame: Frame, times: Sequence[float], series: Sequence[Series]
) -> tuple[list[str], list[Entry]]:
    """Each series' line and (for few windows) markers, with its legend entry drawn as the
    chart draws the series: dashed or not, with a band if any interval is defined and a
    marker if markers were drawn."""
    out: list[str] = []
    entries: list[Entry] = []
    for s in series:
        dash = f' stroke-dasharray="{DASHES}"' if s.dashed else ""
        line = _line(frame, times, s.values)
        if line:
            out.append(f'<path class="line {s.css}"{dash} d="{line}"/>')
        marks = _markers(frame, times, s.values) if len(times) <= MARKER_LIMIT else ""
        if marks:
            out.append(f'<path class="mark {s.css}" d="{marks}"/>')
        banded = s.bands is not None and any(b is not None for b in s.bands)
        entries.append(Entry(s.label, s.css, dashed=s.dashed, band=banded, marker=bool(marks)))
    return out, entries


def _digits(span: float) -> int:
    """Decimals for tick labels over a range of ``span``."""
    if span <= 0 or not math.isfinite(span):
        return 3
    return min(max(0, 2 - math.floor(math.log10(span))), 6)


def reliability_chart(*, chart_id: str, title: str, rows: Sequence[ReliabilityBin]) -> str:
    """A reliability diagram: fraction of positives against mean score per bin (points sized
    by the square root of the bin's count, joined by a line), with the diagonal of perfect
    calibration; under them, each bin's count as a bar over its score range, labelled with the
    number. Empty bins are left out."""
    size = 480
    frame = Frame(
        0.0, 1.0, 0.0, 1.0, width=size, height=size, plot=(LEFT, TOP, size - RIGHT, size - BOTTOM)
    )
    ticks = [(t, format_number(t, 1)) for t in nice_ticks(0.0, 1.0, 6)]
    desc = (
        "Per score bin, the fraction of positive labels against the mean score; points on the "
        "diagonal are perfectly calibrated. Bars along the bottom give each bin's number of "
        "labelled predictions."
    )
    out = _frame_svg(
        frame,
        title=title,
        desc=desc,
        y_label="fraction of positive labels",
        x_ticks=ticks,
        y_ticks=ticks,
        x_label="mean score of the bin",
        chart_id=chart_id,
        square=True,
    )
    out.append(
        f'<path class="level ref" d="M{_f(frame.x(0))} {_f(frame.y(0))}'
        f'L{_f(frame.x(1))} {_f(frame.y(1))}"/>'
    )
    points = [
        (float(m), float(f), row["count"], float(row["lower"]), float(row["upper"]))
        for row in rows
        if (m := row["mean_score"]) is not None and (f := row["fraction_positive"]) is not None
    ]
    if not points:
        out.append(
            f'<text class="empty" x="{frame.width / 2}" y="{frame.height / 2}" '
            'text-anchor="middle">no labelled scores</text>'
        )
    else:
        biggest = max(c for _, _, c, _, _ in points) or 1
        _, _, _, bottom = frame.plot
        tallest = 0.18 * (bottom - frame.plot[1])
        for _, _, c, lower, upper in points:
            lo, hi = frame.x(lower), frame.x(upper)
            height = tallest * c / biggest
            out.append(
                f'<path class="count-bar" d="M{_f(lo + 1)} {_f(bottom)}'
                f'V{_f(bottom - height)}H{_f(hi - 1)}V{_f(bottom)}Z"/>'
                f'<text class="count" x="{_f((lo + hi) / 2)}" y="{_f(bottom - height - 3)}" '
                f'text-anchor="middle">{c}</text>'
            )
        line = "".join(
            ("L" if i else "M") + f"{_f(frame.x(m))} {_f(frame.y(f))}"
            for i, (m, f, _, _, _) in enumerate(points)
        )
        out.append(f'<path class="line s0" d="{line}"/>')
        for m, f, c, _, _ in points:
            r = 2.5 + 6.0 * math.sqrt(c / biggest)
            out.append(
                f'<circle class="mark s0" cx="{_f(frame.x(m))}" cy="{_f(frame.y(f))}" r="{r:.1f}">'
                f"<title>mean score {m:.3f}, fraction positive {f:.3f},"
                f" {plural(c, 'prediction')}</title>"
                "</circle>"
            )
    out.append(
        _legend(
            [
                Entry("bins (point size: count)", "s0", marker=True),
                Entry("perfect calibration", "ref", kind="level"),
            ],
            frame,
        )
    )
    out.append("</svg>")
    return "".join(out)
