"""The notebook face (``from calmon import evaluate_frame, report``): a frame evaluated by
column names into the record ``calmon evaluate`` gives, and the HTML report of a window
against a reference, with the numbers the service stores and the web view's page. Frames are
real pandas frames (polars too where it is installed), dicts of arrays and dicts of lists.
"""

from __future__ import annotations

import doctest
import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calmon.cli import main
from calmon.db.models import Model
from calmon.metrics import evaluate
from calmon.metrics.prepared import ScoreKind
from calmon.notebook import evaluate_frame, report
from calmon.records import EvaluationRecord, WindowRecord
from calmon.services.windows.compute import window_config
from calmon.services.windows.record import evaluate_segment
from calmon.services.windows.reference_cache import reference_from_scores
from calmon.simulation.stream import PHASES, generate_window, plan_windows
from calmon.timeline import iso
from tests.unit.test_records import _missing_and_unknown

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reference" / "notebook.md"


def _stream(*phases: str, n: int = 6000) -> list[Any]:
    plans = plan_windows(
        phases=[PHASES[p] for p in phases],
        window="1h",
        windows_per_phase=1,
        per_window=n,
        now=datetime(2026, 11, 2, tzinfo=UTC),
    )
    return [generate_window(plan, seed=5) for plan in plans]


def _labels_with_gaps(labels: np.ndarray[Any, Any]) -> list[float | None]:
    """``labels`` as a list whose first ten are missing: five None, five NaN."""
    out: list[float | None] = labels.astype(float).tolist()
    out[:10] = [None] * 5 + [float("nan")] * 5
    return out


def test_a_pandas_frame_is_evaluated_as_its_arrays_are() -> None:
    (data,) = _stream("stable")
    labels = _labels_with_gaps(data.labels)
    frame = pd.DataFrame(
        {"proba": data.scores, "is_fraud": labels, "other": np.zeros(data.scores.size)}
    )
    assert frame["is_fraud"].dtype == np.float64  # None became NaN
    result = evaluate_frame(frame, score="proba", label="is_fraud", pi0=[0.01], intervals=True)
    expected = evaluate(data.scores[10:], data.labels[10:], pi0=[0.01], intervals=True, seed=0)
    assert result == {"start": None, "end": None, "segment": "*", "unlabelled": 10, **expected}
    assert result["n"] == data.scores.size - 10
    assert result["intervals"]["regular"]["roc_auc"] is not None
    # a dict of arrays and a dict of lists give the same record (the default seed repeats
    # the intervals)
    arrays = {"score": data.scores, "label": np.array(labels, dtype=np.float64)}
    assert evaluate_frame(arrays, pi0=[0.01], intervals=True) == result
    plain = {"score": data.scores.tolist(), "label": labels}
    assert evaluate_frame(plain, pi0=[0.01], intervals=True) == result


def test_the_record_is_what_calmon_evaluate_gives_for_the_same_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data,) = _stream("prior", n=3000)
    labels = _labels_with_gaps(data.labels)
    path = tmp_path / "rows.csv"
    lines = [
        f"{score!r},{'' if label is None or label != label else int(label)}"
        for score, label in zip(data.scores.tolist(), labels, strict=True)
    ]
    path.write_text("score,label\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert main(["evaluate", str(path), "--pi0", "0.1", "--intervals", "--format", "json"]) == 0
    (printed,) = json.loads(capsys.readouterr().out)
    frame = pd.DataFrame({"score": data.scores, "label": labels})
    assert evaluate_frame(frame, pi0=[0.1], intervals=True) == printed


def test_nullable_pandas_dtypes_mark_missing_labels() -> None:
    (data,) = _stream("stable", n=2000)
    missing = np.zeros(data.scores.size, dtype=bool)
    missing[::7] = True
    expected = evaluate_frame(
        {"score": data.scores, "label": np.where(missing, np.nan, data.labels)}, pi0=[0.05]
    )
    assert expected["unlabelled"] == int(missing.sum())
    nullable_int = pd.array(
        [pd.NA if gone else int(y) for gone, y in zip(missing, data.labels, strict=True)],
        dtype="Int8",
    )
    nullable_bool = pd.array(
        [pd.NA if gone else bool(y) for gone, y in zip(missing, data.labels, strict=True)],
        dtype="boolean",
    )
    for labels in (nullable_int, nullable_bool):
        frame = pd.DataFrame({"score": pd.array(data.scores, dtype="Float64"), "label": labels})
        assert frame["label"].isna().sum() == missing.sum()
        assert evaluate_frame(frame, pi0=[0.05]) == expected, labels.dtype
    with pytest.raises(ValueError, match="score of row 3 is not a finite number: nan"):
        evaluate_frame(
            pd.DataFrame({"score": pd.array([0.1, 0.2, 0.3, None], dtype="Float64"), "label": 1})
        )


def test_polars_frames_are_evaluated_too() -> None:
    pl = pytest.importorskip("polars")
    (data,) = _stream("stable", n=2000)
    labels = _labels_with_gaps(data.labels)
    frame = pl.DataFrame(
        {"score": data.scores, "label": [None if y is None or y != y else int(y) for y in labels]},
        schema={"score": pl.Float64, "label": pl.Int8},
    )
    expected = evaluate_frame({"score": data.scores, "label": labels})
    assert expected["unlabelled"] == 10
    assert evaluate_frame(frame) == expected


def _typed_keys(record: Any, shape: Any) -> list[str]:
    return _missing_and_unknown(record, shape, "record")


@pytest.mark.parametrize("score_kind", ["probability", "score"])
def test_the_record_holds_exactly_the_typed_keys(score_kind: ScoreKind) -> None:
    (data,) = _stream("stable", n=2000)
    frame = pd.DataFrame({"score": data.scores, "label": _labels_with_gaps(data.labels)})
    bare = evaluate_frame(frame, score_kind=score_kind)
    full = evaluate_frame(frame, score_kind=score_kind, pi0=[0.01, 0.2], intervals=True)
    required = EvaluationRecord.__required_keys__
    assert set(bare) == required | ({"reliability"} if score_kind == "probability" else set())
    assert set(full) == set(bare) | {"intervals"}
    assert set(full["calibrated"]) == {"0.01", "0.2"}
    for record in (bare, full):
        assert _typed_keys(record, EvaluationRecord) == []
    # a key the type does not know is seen
    assert _typed_keys({**full, "extra": 1}, EvaluationRecord) == ["+record.extra"]


def test_frame_mistakes_say_what_to_fix() -> None:
    frame = pd.DataFrame({"p": [0.5, 0.7], "y": [1, 2]})
    with pytest.raises(KeyError, match="no column 'score'; the columns are p, y"):
        evaluate_frame(frame)
    with pytest.raises(KeyError, match="no column 'score'; the columns are p, y"):
        evaluate_frame({"p": [0.5], "y": [1]})
    with pytest.raises(ValueError, match="label of row 1 is not 0, 1 or missing: 2"):
        evaluate_frame(frame, score="p", label="y")
    with pytest.raises(ValueError, match="label of row 1 is not 0, 1 or missing: 'yes'"):
        evaluate_frame(pd.DataFrame({"score": [0.5, 0.7], "label": ["1", "yes"]}))
    with pytest.raises(ValueError, match="score of row 0 is not a finite number"):
        evaluate_frame({"score": [np.nan], "label": [1]})


def test_the_report_holds_the_record_the_service_would_store(tmp_path: Path) -> None:
    reference, drifted = _stream("stable", "likelihood")
    frames = [
        pd.DataFrame(
            {
                "score": d.scores,
                "label": pd.array(d.labels, dtype="Int8"),
                "ts": pd.to_datetime(d.timestamps, unit="us", utc=True).tz_convert("Asia/Tokyo"),
            }
        )
        for d in (reference, drifted)
    ]
    path = tmp_path / "report.html"
    made = report(*frames, timestamp="ts", title="fraud <model>", path=str(path))
    assert path.read_text(encoding="utf-8") == made.html
    (record,) = made.records
    assert _typed_keys(record, WindowRecord) == []

    model = Model(
        name="fraud <model>", score_kind="probability", window="1h", threshold=0.5, pi0=[]
    )
    start = datetime.fromtimestamp(int(drifted.timestamps.min()) / 1e6, tz=UTC)
    end = datetime.fromtimestamp(int(drifted.timestamps.max()) / 1e6, tz=UTC)
    built = reference_from_scores(
        config=window_config(model),
        pos_sorted=np.sort(reference.scores[reference.labels == 1]),
        neg_sorted=np.sort(reference.scores[reference.labels == 0]),
        start=start - timedelta(hours=1),
        end=start,
    )
    stored, _, _ = evaluate_segment(
        config=window_config(model),
        segment="*",
        start=start,
        end=end,
        scores=drifted.scores,
        labels=drifted.labels,
        reference=built,
        computed_at=start,
    )
    assert (record["start"], record["end"]) == (stored["start"], stored["end"])
    assert record["start"] == iso(start)  # the Tokyo times, read in UTC
    for key in ("n", "n_pos", "prior", "regular", "intervals", "split", "estimated"):
        assert record[key] == stored[key], key
    assert record["split"] is not None
    likelihood = record["split"]["average_precision"]
    assert likelihood["likelihood_interval"] is not None
    assert likelihood["likelihood_interval"][1] < 0  # the model got worse, and it is sure

    html = made.html
    assert '<h2>Latest window: <span class="v-worse">model got worse</span> against the' in html
    for chart in ("ap", "split", "ratio", "metric"):
        assert f'<svg class="chart wide" id="{chart}"' in html
    assert '<svg class="chart" id="reliability"' in html
    assert "fraud &lt;model&gt;" in html
    assert "<script" not in html
    # self-contained: no link to a server, no icon, no form
    assert not re.findall(r'(?:href|src|action)="[^"?]', html)
    assert "<form" not in html
    inline = made._repr_html_()
    assert inline.startswith('<iframe srcdoc="')
    assert unescape(inline.split('srcdoc="', 1)[1].split('" title=', 1)[0]) == html
    json.dumps(made.records)


def test_without_timestamps_the_window_is_numbered_not_dated() -> None:
    reference, window = _stream("stable", "prior", n=20_000)
    made = report(
        {"score": reference.scores, "label": reference.labels},
        {"score": window.scores, "label": window.labels},
    )
    (record,) = made.records
    assert record["reference"] is not None
    assert record["reference"]["end"] == record["start"]
    assert "the window is numbered, not dated" in made.html
    assert "<h2>Window 1</h2>" in made.html
    assert re.findall(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:Jan|Dec) \d{1,2} \d\d:\d\d\b", made.html) == []
    assert "class ratio moved" in made.html


@pytest.fixture
def local_time_in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is not UTC, so that reading a naive time as local time
    would show."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_time_in_new_york")
def test_every_kind_of_timestamp_column_dates_the_periods_alike() -> None:
    """Aware timestamps in any zone, UTC ``datetime64``, naive datetimes (read as UTC, as
    ``datetime64`` is, whatever the local time zone) and ISO 8601 text give the same
    periods."""
    reference, window = _stream("stable", "prior", n=2000)
    utc = [pd.to_datetime(d.timestamps, unit="us", utc=True) for d in (reference, window)]
    columns: dict[str, list[Any]] = {
        "aware in Paris": [ts.tz_convert("Europe/Paris") for ts in utc],
        "datetime64": [ts.tz_localize(None).to_numpy() for ts in utc],
        "naive datetimes": [list(ts.tz_localize(None).to_pydatetime()) for ts in utc],
        "aware datetimes": [list(ts.to_pydatetime()) for ts in utc],
        "ISO text": [[t.isoformat() for t in ts] for ts in utc],
    }
    periods = {}
    for kind, (ref_ts, win_ts) in columns.items():
        made = report(
            {"score": reference.scores, "label": reference.labels, "ts": ref_ts},
            {"score": window.scores, "label": window.labels, "ts": win_ts},
            timestamp="ts",
        )
        (record,) = made.records
        assert record["reference"] is not None
        periods[kind] = (
            record["reference"]["start"],
            record["reference"]["end"],
            record["start"],
            record["end"],
        )
    first = min(t.min() for t in utc).to_pydatetime()
    assert periods["aware in Paris"][0] == iso(first)
    assert set(periods.values()) == {periods["aware in Paris"]}, periods


def test_the_session_of_the_notebook_doc_runs_as_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``pycon`` block of ``docs/reference/notebook.md``, in order in one namespace, prints
    what the page shows, run from a directory that holds the repository's ``examples/``."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```pycon\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 2
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: dict[str, Any] = {}
    for number, block in enumerate(blocks):
        test = parser.get_doctest(block, namespace, f"block {number}", str(DOC), 0)
        assert len(test.examples) > 3
        runner.run(test, clear_globs=False)
        namespace = test.globs  # a doctest runs in a copy
    assert runner.summarize(verbose=False).failed == 0
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!doctype html>")
