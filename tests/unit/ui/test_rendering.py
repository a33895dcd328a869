"""Charts and pages rendered from records: what the picture holds, not how it looks."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from calmon.records import ReliabilityBin, WindowRecord
from calmon.ui.charts import (
    DASHES,
    LONE_HALF,
    TIME_AXIS,
    Frame,
    Level,
    Series,
    format_number,
    metric_title,
    nice_ticks,
    reliability_chart,
    signed,
    time_chart,
    time_labels,
)
from calmon.ui.pages import ModelSummary, advice_section, index_page, login_page, model_page
from tests.unit.ui.test_verdict import record

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    """The chart as XML (inline SVG in HTML needs no namespace; add it to parse)."""
    return ET.fromstring(svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


def paths(root: ET.Element, css: str) -> list[str]:
    """The ``d`` of the chart's own paths of class ``css`` (not the legend's swatches)."""
    return [p.get("d", "") for p in root.findall(f"{SVG}path") if p.get("class") == css]


def points(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", d)]


def test_line_breaks_at_missing_values_and_bands_follow_intervals() -> None:
    svg = time_chart(
        chart_id="c",
        title="t <&>",
        desc="d",
        y_label="AP",
        times=[0.0, 1.0, 2.0, 3.0],
        series=[Series("s", [0.1, None, 0.3, 0.5], "s0", [(0.0, 0.2), None, (0.2, 0.4), None])],
        levels=[Level("zero", 0.0)],
        y_range=(0.0, 1.0),
    )
    root = parse(svg)
    assert root.findtext(f"{SVG}title") == "t <&>"
    assert root.get("role") == "img"
    (line,) = paths(root, "line s0")
    assert line.count("M") == 2  # a gap at the missing value
    frame = Frame(0.0, 3.0, 0.0, 1.0)
    assert points(line)[0] == pytest.approx((frame.x(0.0), frame.y(0.1)), abs=0.05)
    assert points(line)[-1] == pytest.approx((frame.x(3.0), frame.y(0.5)), abs=0.05)
    (band,) = paths(root, "band s0")
    assert band.count("Z") == 2  # two separate runs, each a lone interval drawn as a bar
    ys = [y for _, y in points(band)]
    assert min(ys) == pytest.approx(frame.y(0.4), abs=0.05)
    assert max(ys) == pytest.approx(frame.y(0.0), abs=0.05)
    legend = [t.text for t in root.iter(f"{SVG}text") if t.text in {"s", "zero"}]
    assert legend == ["s", "zero"]


def test_an_empty_chart_says_so() -> None:
    svg = time_chart(chart_id="c", title="t", desc="d", y_label="y", times=[], series=[])
    assert "no data" in svg
    parse(svg)


def test_markers_only_for_few_windows() -> None:
    def chart(count: int) -> ET.Element:
        values: list[float | None] = [0.5] * count
        return parse(
            time_chart(
                chart_id="c",
                title="t",
                desc="d",
                y_label="y",
                times=[float(i) for i in range(count)],
                series=[Series("s", values, "s0")],
            )
        )

    assert len(paths(chart(10), "mark s0")) == 1
    assert paths(chart(500), "mark s0") == []
    # the element count does not grow with the windows
    assert len(list(chart(500).iter())) < 60


def test_nice_ticks() -> None:
    assert nice_ticks(0.0, 1.0) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(-0.31, 0.02) == pytest.approx([-0.3, -0.2, -0.1, 0.0])


def test_reliability_chart_leaves_out_empty_bins() -> None:
    rows: list[ReliabilityBin] = [
        {"lower": 0.0, "upper": 0.5, "count": 90, "mean_score": 0.1, "fraction_positive": 0.12},
        {"lower": 0.5, "upper": 0.9, "count": 0, "mean_score": None, "fraction_positive": None},
        {"lower": 0.9, "upper": 1.0, "count": 10, "mean_score": 0.95, "fraction_positive": 0.9},
    ]
    root = parse(reliability_chart(chart_id="r", title="r", rows=rows))
    circles = [c for c in root.findall(f"{SVG}circle") if c.get("class") == "mark s0"]
    assert len(circles) == 2
    assert float(circles[0].get("r", 0)) > float(circles[1].get("r", 0))  # bigger bin
    # each bin's count, as a bar over its score range and as a number
    counts = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "count"]
    assert counts == ["90", "10"]
    bars = paths(root, "count-bar")
    assert len(bars) == 2
    heights = [max(y for _, y in points(d)) - min(y for _, y in points(d)) for d in bars]
    assert heights[0] == pytest.approx(9 * heights[1], rel=0.01)
    assert "no labelled scores" in reliability_chart(chart_id="r", title="r", rows=rows[1:2])


def window_records(count: int) -> list[Any]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(count):
        moved = i >= count // 2
        r = record(
            ratio=0.01 if moved else 0.05,
            prior_interval=[-0.3, -0.2] if moved else None,
            estimated=[0.008, 0.012] if moved else [0.045, 0.055],
        )
        r["start"] = (start + i * timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        r["end"] = (start + (i + 1) * timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        r["segment"] = "*"
        r["regular"]["roc_auc"] = 0.9
        r["intervals"] = {
            "regular": {"average_precision": [0.35, 0.45], "roc_auc": [0.88, 0.92]},
            "calibrated": {"reference": None},
        }
        r["reliability"] = [
            {"lower": 0.0, "upper": 1.0, "count": 5, "mean_score": 0.3, "fraction_positive": 0.2}
        ]
        out.append(r)
    return out


def one_segment_page(records: list[Any], selected: str | None) -> str:
    """The model page of ``records`` (segment ``*``, ROC AUC charted), ``selected`` shown."""
    return model_page(
        name="m",
        window="1h",
        segment="*",
        segments=["*"],
        metric="roc_auc",
        metrics=["roc_auc"],
        records=records,
        selected=selected,
        model_alerts=[],
    )


def test_model_page_holds_every_chart_and_verdict() -> None:
    records = window_records(6)
    html = model_page(
        name="m<x>",
        window="1h",
        segment="*",
        segments=["*", "eu"],
        metric="roc_auc",
        metrics=["roc_auc", "average_precision"],
        records=records,
        selected=records[1]["start"],
        model_alerts=["prior shift: class ratio went down"],
    )
    assert "m&lt;x&gt;" in html
    assert "m<x>" not in html
    for chart in ("ap", "split", "ratio", "metric"):
        assert f'<svg class="chart wide" id="{chart}"' in html
    assert '<svg class="chart" id="reliability"' in html
    table = html[html.index('<table id="verdicts"') :]
    assert table.count('class="v-ratio">class ratio moved</span>') == 3
    assert table.count('class="ok">neither: stable</span>') == 3
    assert table.count("against the fixed reference 1\u20132 Nov 2026</span></td></tr>") == 6
    assert f"Window {records[1]['start']}" in html
    assert "<script" not in html
    assert "http://" not in html.replace('"http://www.w3.org', "")


def test_the_served_page_links_each_window_and_the_standalone_page_links_none() -> None:
    records = window_records(3)
    served = one_segment_page(records, None)
    assert served.count('href="/ui/models/m?segment=%2A&amp;metric=roc_auc&amp;window=') == 3
    standalone = model_page(
        name="m",
        window="",
        segment="*",
        segments=["*"],
        metric="roc_auc",
        metrics=["roc_auc"],
        records=records,
        selected=None,
        model_alerts=[],
        standalone="<p>intro</p>",
    )
    assert re.findall(r'(?:href|src|action)="', standalone) == []
    start = records[0]["start"]
    assert f'<td class="text"><time datetime="{start}">2026-01-01 00:00</time></td>' in standalone


def test_numbered_windows_show_their_position_and_no_date() -> None:
    records = window_records(3)
    html = model_page(
        name="m",
        window="",
        segment="*",
        segments=["*"],
        metric="roc_auc",
        metrics=["roc_auc"],
        records=records,
        selected=None,
        model_alerts=[],
        standalone="<p>intro</p>",
        numbered=True,
    )
    assert "2026" not in html
    assert [f'<td class="text">window {i}</td>' in html for i in (1, 2, 3)] == [True] * 3
    assert "<h2>Window 3</h2>" in html
    assert "Reliability diagram of window 3" in html
    ticks = [
        t.text for t in parse(_svg(html, "split")).iter(f"{SVG}text") if t.get("class") == "tick"
    ]
    assert [t for t in ticks if t in {"1", "2", "3"}] == ["1", "2", "3"]
    assert f">{TIME_AXIS}<" not in html
    assert ">window</text>" in html


def _svg(html: str, chart_id: str) -> str:
    """The chart ``chart_id`` of a page."""
    start = html.index(f'<svg class="chart wide" id="{chart_id}"')
    return html[start : html.index("</svg>", start) + len("</svg>")]


def test_the_estimate_sentence_names_what_scores_cannot_see() -> None:
    records = window_records(4)
    for r, verdict, interval in zip(
        records,
        (
            "no_change",
            "fewer_positives_or_lower_scores",
            "more_positives_or_higher_scores",
            "no_change",
        ),
        ([0.045, 0.055], [0.01, 0.02], [0.09, 0.12], [0.0, 0.02]),
        strict=True,
    ):
        r.update(n=100, unlabelled=19_900)
        r["estimated"].update(verdict=verdict, positive_class_ratio_interval=interval, n=20_000)
        r["estimated"]["positive_class_ratio_resolved"] = interval[0] > 0

    steady = one_segment_page(records, records[0]["start"])
    assert (
        "Scores alone cannot tell fewer positives from positives scoring like negatives" in steady
    )
    fell = one_segment_page(records, records[1]["start"])
    assert "That reads as fewer positives, or as positives scoring lower" in fell
    assert "fewer positives, or positives scoring lower (estimated without labels)" in fell
    rose = one_segment_page(records, records[2]["start"])
    assert "That reads as more positives, or as negatives scoring like positives" in rose
    assert "more positives, or negatives scoring like positives (estimated without labels)" in rose
    # every window's sentence is on the page: only the one whose interval reaches 0 says so
    assert rose.count("Not resolved: the estimate&#x27;s interval reaches 0") == 1


def test_model_page_of_500_windows_renders_every_row() -> None:
    """Its speed is measured by ``bench/ui.py``, not here."""
    html = one_segment_page(window_records(500), None)
    assert html.count("<tr") == 501


def test_index_and_login_pages() -> None:
    html = index_page(
        [
            ModelSummary("a", "1h", "probability", window_records(1)[0], ["stale: x"]),
            ModelSummary("b", "5m", "score", None, []),
        ]
    )
    assert '<a href="/ui/models/a">a</a>' in html
    assert '<div class="alert">stale: x</div>' in html
    assert "no window computed yet" in html
    assert "No model yet" in index_page([])
    login = login_page(error="unknown token", next_path='/ui/models/a?x="')
    assert 'role="alert">unknown token' in login
    assert 'value="/ui/models/a?x=&quot;"' in login


def test_numbers_use_a_true_minus_and_no_negative_zero() -> None:
    assert format_number(-0.25) == "\u22120.250"
    assert format_number(-0.0001) == "0.000"
    assert signed(0.0123) == "+0.012"
    assert format_number(None) == "\u2013"


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_the_time_axis_shows_dates_where_the_day_changes() -> None:
    day = 86_400.0
    ticks = [day - 7200, day - 3600, day, day + 3600]
    assert time_labels(ticks, 4 * 3600) == ["Jan 1 22:00", "23:00", "Jan 2 00:00", "01:00"]
    assert time_labels([0.0, 40 * day], 40 * day) == ["1970-01-01", "1970-02-10"]
    svg = parse(
        time_chart(
            chart_id="c",
            title="t",
            desc="d",
            y_label="y",
            times=[day, day + 3600],
            series=[Series("s", [0.2, 0.3], "s0")],
            half_window=1800,
        )
    )
    assert "Jan 2 00:00" in _texts(svg)
    assert TIME_AXIS in _texts(svg)


def test_points_stand_at_window_starts_as_the_table_lists_them() -> None:
    records = window_records(3)
    html = model_page(
        name="m",
        window="1h",
        segment="*",
        segments=["*"],
        metric="roc_auc",
        metrics=["roc_auc"],
        records=records,
        selected=None,
        model_alerts=[],
    )
    found = re.search(r'<svg class="chart wide" id="ap".*?</svg>', html, re.DOTALL)
    assert found is not None
    svg = parse(found[0])
    (line,) = paths(svg, "line s0")
    xs = [x for x, _ in points(line)]
    # three starts an hour apart, the axis half an hour wider on each side
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    frame = Frame(start - 1800, start + 2 * 3600 + 1800, 0.0, 1.0)
    assert xs == pytest.approx([frame.x(start + i * 3600) for i in range(3)], abs=0.05)
    assert "Jan 1 00:00" in _texts(svg)
    assert metric_title("average_precision") in _texts(svg)
    assert "average_precision" not in "".join(_texts(svg))


def test_the_legend_draws_each_entry_as_the_chart_does() -> None:
    svg = parse(
        time_chart(
            chart_id="c",
            title="t",
            desc="d",
            y_label="y",
            times=[0.0, 1.0],
            series=[
                Series("banded", [0.1, 0.2], "s0", [(0.0, 0.2), (0.1, 0.3)]),
                Series("dashed", [0.3, 0.4], "ref", dashed=True),
            ],
            levels=[Level("zero", 0.0)],
        )
    )
    legend = svg.find(f"{SVG}g[@class='legend']")
    assert legend is not None
    swatches = [(p.get("class"), p.get("stroke-dasharray")) for p in legend.findall(f"{SVG}path")]
    assert swatches == [
        ("band s0", None),
        ("line s0", None),
        ("line ref", DASHES),
        ("level ref", None),  # dotted by the style sheet, as the level's own line
    ]
    (chart_dashed,) = [p for p in svg.findall(f"{SVG}path") if p.get("class") == "line ref"]
    assert chart_dashed.get("stroke-dasharray") == DASHES
    (chart_level,) = [p for p in svg.findall(f"{SVG}path") if p.get("class") == "level ref"]
    assert chart_level.get("stroke-dasharray") is None
    markers = [c.get("class") for c in legend.findall(f"{SVG}circle")]
    assert markers == ["mark s0", "mark ref"]


def test_a_lone_interval_is_a_narrow_box_around_its_point() -> None:
    svg = parse(
        time_chart(
            chart_id="c",
            title="t",
            desc="d",
            y_label="y",
            times=[0.0],
            series=[Series("s", [0.5], "s0", [(0.4, 0.6)])],
            half_window=1800,
        )
    )
    (band,) = paths(svg, "band s0")
    xs = [x for x, _ in points(band)]
    assert max(xs) - min(xs) == pytest.approx(2 * LONE_HALF, abs=0.1)


def _window(advice: Any) -> WindowRecord:
    """A window record holding ``advice``, with the start its calibration link names."""
    return cast(WindowRecord, {"start": "2024-05-01T10:00:00Z", "advice": advice})


def test_advice_shows_the_advised_threshold_beside_the_configured_one() -> None:
    advice = {
        "objective": {"target_precision": 0.8},
        "configured_threshold": 0.5,
        "prior": 0.01,
        "prior_source": "measured",
        "threshold": 0.9123,
        "expected": {"precision": 0.81, "recall": 0.4, "alert_rate": 0.005, "cost": None},
        "expected_intervals": {
            "precision": [0.7612, 0.8433],
            "recall": [0.37, 0.43],
            "alert_rate": [0.0046, 0.0055],
            "cost": None,
        },
        "assumption": {"holds": True, "p_value": 0.3, "method": "ks_by_class"},
        "reason": None,
    }
    shown = advice_section(_window(advice), name="m", segment="*")
    assert "<td>0.8100</td><td>[0.7612, 0.8433]</td>" in shown
    assert "over the reference's sampling" in shown
    assert "Advised threshold: <strong>0.9123</strong>" in shown
    assert "Configured threshold: <strong>0.5000</strong>" in shown
    assert "precision at least 0.800" in shown
    assert "cost per prediction" not in shown
    assert "broken assumption" not in shown
    assert "/v1/models/m/calibration?window=2024-05-01T10%3A00%3A00Z&amp;segment=%2A" in shown
    advice["assumption"] = {"holds": False, "p_value": 1e-9, "method": "ks_by_class"}
    broken = advice_section(_window(advice), name="m", segment="*")
    assert "broken assumption" in broken
    assert "(p = 1e-09)" in broken
    # withheld with its reason, not shown as a number
    assert "<strong>Advice withheld</strong>" in broken
    assert "0.9123" not in broken
    assert "Advised threshold" not in broken
    withheld = {**advice, "threshold": None, "expected": None, "reason": "too few labels <x>"}
    shown = advice_section(_window(withheld), name="m", segment="*")
    assert "No advice: too few labels &lt;x&gt;." in shown
    assert advice_section(_window(None), name="m", segment="*") == ""


def test_counts_in_the_tables_have_thousands_separators() -> None:
    records = window_records(1)
    records[0].update(n=1_234_567, n_pos=12_345, unlabelled=2_500)
    page = one_segment_page(records, None)
    assert "<td>1,234,567</td><td>12,345</td><td>2,500</td>" in page
    listed = index_page([ModelSummary("a", "1h", "probability", records[0], [])])
    assert "<td>1,234,567</td><td>12,345</td>" in listed
