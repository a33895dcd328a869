"""Counts and references in words (:mod:`calmon.words`), and the human-facing outputs that use
them: the web view's pages, the offline report and `calmon windows`, rendered with one item
and with several, hold no "1 windows" and no sentence cut after a semicolon."""

from __future__ import annotations

import argparse
import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from calmon.commands.retention import describe
from calmon.commands.simulate import _announce
from calmon.commands.windows import ADVICE_LEGEND, EPILOG, LEGEND, format_table
from calmon.metrics import evaluate
from calmon.offline.grouping import Group
from calmon.offline.html_report import Period, build
from calmon.offline.report import make_record, render_table
from calmon.ui.pages import ModelSummary, advice_section, index_page, model_page
from calmon.ui.verdict import segment_alerts
from calmon.words import period_text, plural, reference_words, verdict_against
from tests.unit.ui.test_rendering import window_records
from tests.unit.ui.test_verdict import record

#: a count of one before a plural noun ("1 windows"); singular words ending in s allowed
ONE_PLURAL = re.compile(r"(?<![\w.,-])1 ([a-z]+s)\b")
SINGULAR_S = frozenset({"class", "is", "was", "has", "does", "plus", "minus", "this", "its"})
#: a line or text that ends after a semicolon, or with one lone word after it ("…; verdict")
CUT = re.compile(r";\s*(\w+)?\s*$")
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def one_plurals(text: str) -> list[str]:
    """Every "1 <plural noun>" of ``text``."""
    return [m.group(0) for m in ONE_PLURAL.finditer(text) if m.group(1) not in SINGULAR_S]


def cut_sentences(lines: list[str]) -> list[str]:
    """The lines of ``lines`` that end mid-sentence."""
    return [line for line in lines if CUT.search(line)]


def page_text(page: str) -> list[str]:
    """The text nodes of a page, without its style sheet, unescaped."""
    body = re.sub(r"<style>.*?</style>", "", page, flags=re.DOTALL)
    return [
        html.unescape(part).strip()
        for part in re.split(r"<[^>]+>", body)
        if html.unescape(part).strip()
    ]


def test_plural() -> None:
    assert [plural(n, "window") for n in (0, 1, 2)] == ["0 windows", "1 window", "2 windows"]
    assert plural(1, "class", "classes") == "1 class"
    assert plural(3, "class", "classes") == "3 classes"
    assert plural(12000, "positive") == "12,000 positives"


@pytest.mark.parametrize(
    ("start", "end", "text"),
    [
        (DAY, DAY + timedelta(days=2), "1\u20132 Nov 2026"),
        (DAY, DAY + timedelta(days=1), "1 Nov 2026"),
        (DAY - timedelta(days=2), DAY + timedelta(days=2), "30 Oct \u2013 2 Nov 2026"),
        (
            datetime(2025, 12, 31, tzinfo=UTC),
            datetime(2026, 1, 2, tzinfo=UTC),
            "31 Dec 2025 \u2013 1 Jan 2026",
        ),
        (DAY + timedelta(hours=6), DAY + timedelta(hours=18), "1 Nov 2026 06:00\u201318:00 UTC"),
        (
            DAY + timedelta(hours=6),
            DAY + timedelta(days=1, hours=6),
            "1 Nov 2026 06:00 \u2013 2 Nov 2026 06:00 UTC",
        ),
    ],
)
def test_period_text(start: datetime, end: datetime, text: str) -> None:
    assert period_text(start, end) == text


def test_reference_words() -> None:
    fixed: Any = {
        "kind": "fixed",
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-11-03T00:00:00Z",
        "windows": None,
    }
    trailing: Any = {"kind": "trailing", "start": "", "end": "", "windows": 2}
    assert reference_words(fixed) == "the fixed reference 1\u20132 Nov 2026"
    assert reference_words(trailing) == "the previous 2 windows"
    one: Any = {**trailing, "windows": 1}
    assert reference_words(one) == "the previous window"
    assert reference_words(trailing, pooled=True) == "the 2 windows before the pooled ones"
    assert reference_words(None) == "no reference yet"


def test_a_verdict_names_the_decisions_reference() -> None:
    window = record(trailing=7)
    assert verdict_against(window) == "against the previous 7 windows"
    named: Any = {
        **window,
        "decision": {
            "windows": 3,
            "reference": {"kind": "trailing", "start": "", "end": "", "windows": 7},
        },
    }
    assert verdict_against(named) == "against the 7 windows before the pooled ones"
    alone: Any = {**window, "decision": {"windows": 3, "reference": None}}
    assert verdict_against(alone) == "with no reference yet"
    assert verdict_against(record()) == "against the fixed reference 1\u20132 Nov 2026"


def test_an_alert_of_many_segments_is_said_once_with_them_counted() -> None:
    shifted = record(ratio=0.008, prior_interval=[-0.3, -0.25])
    latest = [("*", shifted), *((f"s{i}", shifted) for i in range(6)), ("quiet", record())]
    (text,) = segment_alerts(latest)
    assert text == (
        "prior shift: class ratio went down \u2014 against the fixed reference 1\u20132 Nov"
        " 2026, in all predictions and 6 of 7 segments: s0, s1, s2 and 3 more"
    )
    everywhere = [(f"s{i}", shifted) for i in range(4)]
    assert segment_alerts(everywhere)[0].endswith("2026, in all 4 segments")
    assert segment_alerts([("eu", shifted)])[0].endswith("2026, in segment eu")
    assert segment_alerts([("*", shifted)])[0].endswith("1\u20132 Nov 2026")


def _decided(verdict: str, *, windows: int, n_pos: int, start: str) -> Any:
    out = record(n=400, trailing=2)
    out["start"] = start
    out["end"] = start
    out["segment"] = "*"
    out["intervals"] = {"regular": {}, "calibrated": {"reference": None}}
    out["decision"] = {
        "windows": windows,
        "start": start,
        "n": 400 * windows,
        "n_pos": n_pos,
        "verdict": verdict,
        "metric": "average_precision",
        "prior_part": 0.0,
        "prior_interval": None,
        "likelihood_part": None,
        "likelihood_interval": None,
        "positive_class_ratio": 0.05,
        "positive_class_ratio_interval": [0.03, 0.07],
        "reference_positive_class_ratio_interval": [0.0485, 0.0515],
        "positives_shift": None,
        "reference": out["decision"]["reference"],
    }
    out["advice"] = {
        "objective": {"alert_rate": 0.05},
        "configured_threshold": 0.5,
        "prior": 0.05,
        "prior_source": "measured",
        "threshold": 0.2868,
        "expected": None,
        "expected_intervals": None,
        "assumption": {"holds": False, "p_value": 1e-6, "method": "ks_by_class"},
        "reason": None,
    }
    return out


def _records(count: int) -> list[Any]:
    starts = [f"2026-11-0{3 + i}T00:00:00Z" for i in range(count)]
    return [
        _decided("not_enough_data", windows=1 + i, n_pos=1 + 20 * i, start=start)
        for i, start in enumerate(starts)
    ]


def _outputs(count: int) -> list[str]:
    """Every human-facing output of ``count`` items."""
    records = _records(count)
    hand = window_records(count)
    models = [
        ModelSummary(
            name=f"m{i}",
            window="1h",
            score_kind="probability",
            latest=r,
            alerts=segment_alerts([("*", r), *((f"s{j}", r) for j in range(count))]),
            segments=count,
        )
        for i, r in enumerate(hand)
    ]
    pages = [
        index_page(models),
        model_page(
            name="m",
            window="1h",
            segment="*",
            segments=["*"],
            metric="roc_auc",
            metrics=["roc_auc"],
            records=records,
            selected=None,
            model_alerts=segment_alerts([("*", records[-1])]),
        ),
        model_page(
            name="m",
            window="1h",
            segment="*",
            segments=["*"],
            metric="roc_auc",
            metrics=["roc_auc"],
            records=hand,
            selected=None,
            model_alerts=[],
        ),
        advice_section(records[0], name="m", segment="*"),
    ]
    rng = np.random.default_rng(1)
    periods = []
    for i in range(count + 1):
        labels = (rng.random(300) < 0.2).astype(np.int8)
        scores = np.clip(rng.normal(0.3 + 0.4 * labels, 0.15), 0.0, 1.0)
        periods.append(
            Period(scores, labels, DAY + i * timedelta(days=1), DAY + (i + 1) * timedelta(days=1))
        )
    report = build(periods[0], periods[1:], pi0=[0.01])
    texts = ["\n".join(page_text(page)) for page in [*pages, report.html]]
    texts.append(format_table(records, model="m", segment="*", metric="average_precision"))
    texts.append(format_table(report.records, model="m", segment="*", metric="f1"))
    table = render_table(
        [
            make_record(
                Group(None, None, "*", p.scores, p.labels, count),
                evaluate(p.scores, p.labels, pi0=[0.01], intervals=True, seed=1),
            )
            for p in periods[:count]
        ]
    )
    texts.append(table)
    texts += [LEGEND, ADVICE_LEGEND, EPILOG, describe(count)]
    return texts


@pytest.mark.parametrize("count", [1, 2])
def test_outputs_count_in_words_and_finish_their_sentences(count: int) -> None:
    texts = _outputs(count)
    found = [hit for text in texts for hit in one_plurals(text)]
    assert found == []
    # the epilog's paragraphs are wrapped: a line of one may end with ";"
    paragraphs = [" ".join(part.split()) for part in EPILOG.split("\n\n")]
    lines = [line for text in texts if text != EPILOG for line in text.splitlines()]
    assert cut_sentences(lines + paragraphs) == []
    assert LEGEND.endswith(".")
    assert ADVICE_LEGEND.endswith(".")
    joined = "\n".join(texts)
    # what each verdict compares against, and advice on a broken assumption withheld
    assert "against the previous 2 windows" in joined
    assert "against the fixed reference 1\u20132 Nov 2026" in joined
    assert "Advised threshold" not in texts[3]
    assert "Advice withheld" in texts[3]
    assert "0.2868" not in texts[3]


def test_the_checks_catch_what_they_look_for() -> None:
    assert one_plurals("sent 1 predictions; 1 class; 21 windows; 1 window") == ["1 predictions"]
    assert cut_sentences(["decision: its AP likelihood part; verdict", "a; b c.", "x;"]) == [
        "decision: its AP likelihood part; verdict",
        "x;",
    ]


def test_simulate_announces_its_counts_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    class Plan:
        start = DAY
        end = DAY + timedelta(hours=1)

    args = argparse.Namespace(model="m", window="1h", phases=["stable"], per_window=1)
    _announce(args=args, plans=[Plan()], seed=1)  # type: ignore[list-item]
    said = capsys.readouterr().err
    assert "1 window of 1h" in said
    assert "1 prediction each" in said
    assert one_plurals(said) == []
