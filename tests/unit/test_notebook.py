"""The notebook face: a frame evaluated by column names, and the HTML report of a window
against a reference, with the numbers the service stores and the web view's page.

pandas is not in the locked test environment, so the frames here are the smallest thing
the face accepts: a column by name that has ``to_numpy()``, as a pandas column has.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calmon.db.models import Model
from calmon.metrics import evaluate
from calmon.notebook import evaluate_frame, report
from calmon.services.references import reference_from_scores
from calmon.services.window_compute import evaluate_segment
from calmon.simulation.stream import PHASES, generate_window, plan_windows


class Column:
    """A column as pandas gives one: values behind ``to_numpy()``."""

    def __init__(self, values: Any) -> None:
        self._values = values

    def to_numpy(self) -> np.ndarray[Any, Any]:
        return np.asarray(self._values)


class Frame:
    """Columns by name, and the ``columns`` a KeyError lists."""

    def __init__(self, **columns: Any) -> None:
        self._columns = {name: Column(values) for name, values in columns.items()}
        self.columns = list(columns)

    def __getitem__(self, name: str) -> Column:
        return self._columns[name]


def _stream(*phases: str, n: int = 6000) -> list[Any]:
    plans = plan_windows(
        phases=[PHASES[p] for p in phases],
        window="1h",
        windows_per_phase=1,
        per_window=n,
        now=datetime(2026, 11, 2, tzinfo=UTC),
    )
    return [generate_window(plan, seed=5) for plan in plans]


def test_a_frame_is_evaluated_by_its_column_names() -> None:
    (data,) = _stream("stable")
    labels: list[float | None] = data.labels.astype(float).tolist()
    labels[:10] = [None] * 5 + [float("nan")] * 5
    frame = Frame(proba=data.scores, is_fraud=labels, other=np.zeros(data.scores.size))
    result = evaluate_frame(frame, score="proba", label="is_fraud", pi0=[0.01], intervals=True)
    expected = evaluate(data.scores[10:], data.labels[10:], pi0=[0.01], intervals=True, seed=0)
    assert result == {"unlabelled": 10, **expected}
    assert result["intervals"]["regular"]["roc_auc"] is not None
    # a plain dict of lists works too, and the default seed repeats the intervals
    plain = {"score": data.scores.tolist(), "label": labels}
    assert evaluate_frame(plain, pi0=[0.01], intervals=True) == result


def test_frame_mistakes_say_what_to_fix() -> None:
    frame = Frame(p=[0.5, 0.7], y=[1, 2])
    with pytest.raises(KeyError, match="no column 'score'; the columns are p, y"):
        evaluate_frame(frame)
    with pytest.raises(ValueError, match="label of row 1 is not 0, 1 or missing: 2"):
        evaluate_frame(frame, score="p", label="y")
    with pytest.raises(ValueError, match="score of row 0 is not a finite number"):
        evaluate_frame(Frame(score=[np.nan], label=[1]))


def test_the_report_holds_the_record_the_service_would_store(tmp_path: Path) -> None:
    reference, drifted = _stream("stable", "likelihood")
    frames = [
        Frame(score=d.scores, label=d.labels, ts=d.timestamps.astype("datetime64[us]"))
        for d in (reference, drifted)
    ]
    path = tmp_path / "report.html"
    made = report(*frames, timestamp="ts", title="fraud <model>", path=str(path))
    assert path.read_text(encoding="utf-8") == made.html
    (record,) = made.records

    model = Model(
        name="fraud <model>", score_kind="probability", window="1h", threshold=0.5, pi0=[]
    )
    start = datetime.fromtimestamp(int(drifted.timestamps.min()) / 1e6, tz=UTC)
    end = datetime.fromtimestamp(int(drifted.timestamps.max()) / 1e6, tz=UTC)
    built = reference_from_scores(
        model=model,
        pos_sorted=np.sort(reference.scores[reference.labels == 1]),
        neg_sorted=np.sort(reference.scores[reference.labels == 0]),
        start=start - timedelta(hours=1),
        end=start,
    )
    stored, _, _ = evaluate_segment(
        model=model,
        segment="*",
        start=start,
        end=end,
        scores=drifted.scores,
        labels=drifted.labels,
        reference=built,
        computed_at=start,
    )
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


def test_without_timestamps_the_periods_are_consecutive_days() -> None:
    reference, window = _stream("stable", "prior", n=20_000)
    made = report(
        {"score": reference.scores, "label": reference.labels},
        {"score": window.scores, "label": window.labels},
    )
    (record,) = made.records
    assert record["reference"] is not None
    assert record["reference"]["end"] == record["start"]
    assert "drawn as consecutive days" in made.html
    assert "class ratio moved" in made.html
