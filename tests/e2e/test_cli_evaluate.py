"""`calmon evaluate` run as a real process on real files.

Expected values come from the metric test vectors (``tests/data/metrics``) or are computed
here independently of the service code (plain Python grouping, scikit-learn metrics).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "data" / "metrics"
EXPECTED = json.loads((VECTORS / "expected.json").read_text())


def calmon(
    *args: str | Path, stdin: str | None = None, program: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = program or [sys.executable, "-m", "calmon.cli"]
    return subprocess.run(
        [*command, "evaluate", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def evaluate_json(*args: str | Path, stdin: str | None = None) -> list[dict[str, Any]]:
    done = calmon(*args, "--format", "json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    records: list[dict[str, Any]] = json.loads(done.stdout)
    return records


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_close(found: Any, expected: Any, where: str, tolerance: float = 1e-9) -> None:
    if expected is None:
        assert found is None, where
    else:
        assert found is not None, where
        assert math.isclose(found, expected, rel_tol=0, abs_tol=tolerance), (where, found, expected)


@pytest.mark.parametrize("vector", EXPECTED, ids=[vector["name"] for vector in EXPECTED])
def test_reference_vectors(vector: dict[str, Any], tmp_path: Path) -> None:
    arrays = np.load(VECTORS / vector["file"])
    lines = ["label,score"] + [
        f"{int(y)},{float(s)!r}" for y, s in zip(arrays["y"], arrays["s"], strict=True)
    ]
    path = write(tmp_path / "set.csv", lines)
    options = [f"--pi0={p}" for p in vector["pi0"]]
    options += ["--threshold", str(vector["threshold"]), "--score-kind", vector["score_kind"]]
    [record] = evaluate_json(path, *options)
    expected = vector["expected"]
    # docs/reference/metrics.md: unless a record says
    tolerance = float(vector.get("tolerance", 1e-9))
    assert (record["start"], record["end"], record["segment"]) == (None, None, "*")
    assert record["unlabelled"] == 0
    assert record["n"] == expected["n"]
    assert record["n_pos"] == expected["n_pos"]
    assert record["n_neg"] == expected["n"] - expected["n_pos"]
    assert_close(record["prior"], expected["prior"], "prior", tolerance)
    assert set(record["regular"]) == set(expected["regular"])
    for metric, value in expected["regular"].items():
        assert_close(record["regular"][metric], value, metric, tolerance)
    assert list(record["calibrated"]) == [repr(float(p)) for p in vector["pi0"]]
    for pi0, values in expected["calibrated"].items():
        for metric, value in values.items():
            where = f"{metric} at {pi0}"
            assert_close(record["calibrated"][pi0][metric], value, where, tolerance)
    assert len(record["reliability"]) == 10


OFFSETS = (timezone(timedelta(hours=2)), timezone(-timedelta(hours=5, minutes=30)))


def timestamp_text(moment: datetime, style: int) -> str:
    """Three spellings: Z; +02:00; -05:30 with microseconds."""
    if style == 0:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style == 1:
        return moment.astimezone(OFFSETS[0]).isoformat(timespec="seconds")
    return moment.astimezone(OFFSETS[1]).isoformat(timespec="microseconds")


def test_windows_and_segments_match_an_independent_computation(tmp_path: Path) -> None:
    rng = np.random.default_rng(2024)
    n = 4_000
    start = datetime(2024, 3, 10, 21, 17, tzinfo=UTC)
    rows = []
    for i in range(n):
        moment = start + timedelta(seconds=float(rng.uniform(0, 5 * 3600)))
        moment = moment.replace(microsecond=int(rng.integers(0, 1000)) * 1000)
        positive = rng.random() < 0.3
        score = float(np.clip(rng.normal(0.65 if positive else 0.35, 0.2), 0, 1))
        label = "" if rng.random() < 0.05 else str(int(positive))
        segment = ["country=FR", "country=DE", "", "b.2"][int(rng.integers(0, 4))]
        rows.append((moment, score, label, segment, i % 3))
    lines = ["id,segment,timestamp,score,label"] + [
        f"p{i},{segment},{timestamp_text(moment, style)},{score!r},{label}"
        for i, (moment, score, label, segment, style) in enumerate(rows)
    ]
    path = write(tmp_path / "stream.csv", lines)
    threshold, pi0 = 0.45, 0.2
    records = evaluate_json(
        path, "--window", "1h", "--by-segment", "--threshold", str(threshold), "--pi0", str(pi0)
    )

    groups: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for moment, score, label, segment, _ in rows:
        hour = moment.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        groups[hour, "*"].append((score, label))
        if segment:
            groups[hour, segment].append((score, label))
    expected_keys = sorted(groups, key=lambda key: (key[0], key[1] != "*", key[1]))
    assert [(r["start"], r["segment"]) for r in records] == expected_keys
    assert len({r["start"] for r in records}) == 6

    for record in records:
        key = (record["start"], record["segment"])
        end = datetime.fromisoformat(record["start"]) + timedelta(hours=1)
        assert record["end"] == end.strftime("%Y-%m-%dT%H:%M:%SZ")
        members = groups[key]
        labelled = [(s, int(y)) for s, y in members if y != ""]
        assert record["unlabelled"] == len(members) - len(labelled)
        scores = np.array([s for s, _ in labelled])
        labels = np.array([y for _, y in labelled])
        tp = int(np.sum((scores >= threshold) & (labels == 1)))
        fp = int(np.sum((scores >= threshold) & (labels == 0)))
        prior = labels.mean()
        assert record["n"] == labels.size
        assert record["n_pos"] == int(labels.sum())
        assert_close(record["prior"], prior, f"{key} prior")
        regular = record["regular"]
        assert_close(regular["precision"], tp / (tp + fp), f"{key} precision")
        assert_close(regular["recall"], tp / labels.sum(), f"{key} recall")
        assert_close(regular["roc_auc"], roc_auc_score(labels, scores), f"{key} roc_auc")
        assert_close(
            regular["average_precision"],
            average_precision_score(labels, scores),
            f"{key} average_precision",
        )
        assert_close(regular["brier"], brier_score_loss(labels, scores), f"{key} brier")
        r = prior * (1 - pi0) / (pi0 * (1 - prior))
        assert_close(
            record["calibrated"][repr(pi0)]["precision"],
            tp / (tp + r * fp),
            f"{key} calibrated precision",
        )


def test_stdin_table(tmp_path: Path) -> None:
    text = "score,label\n0.9,1\n0.8,1\n0.3,0\n0.6,0\n0.2,\n"
    done = calmon("-", "--pi0", "0.5", "--pi0", "0.01", stdin=text)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert lines[0] == "window all  segment *  n 4  n_pos 2  prior 0.5000  unlabelled 1"
    assert lines[1].split() == ["metric", "regular", "pi0=0.5", "pi0=0.01"]
    table = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    # at 0.5: TP = 2, FP = 1; at prior 0.5, pi0 = 0.5 changes nothing;
    # at pi0 = 0.01: r = 0.5 * 0.99 / (0.01 * 0.5) = 99, P = 2 / (2 + 99) = 0.01980
    assert table["precision"] == ["0.6667", "0.6667", "0.01980"]
    assert table["recall"] == ["1.000"]
    assert table["roc_auc"] == ["1.000"]
    assert table["brier"] == [format((0.01 + 0.04 + 0.09 + 0.36) / 4, "#.4g")]


def test_table_with_five_awkward_pi0_fits_100_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    labels = rng.random(300) < 0.3
    scores = np.clip(rng.normal(0.3 + 0.3 * labels, 0.2), 0.0, 1.0)
    path = write(
        tmp_path / "set.csv",
        ["score,label"] + [f"{float(s)!r},{int(y)}" for s, y in zip(scores, labels, strict=True)],
    )
    pi0s = ["0.00012345678", "0.00023456789", "0.00034567891", "0.00045678912", "0.00056789"]
    done = calmon(path, "--intervals", "--seed", "3", *(f"--pi0={p}" for p in pi0s))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[1].split() == [
        "metric",
        "regular",
        "pi0=0.000123",
        "pi0=0.000235",
        "pi0=0.000346",
        "pi0=0.000457",
        "pi0=0.000568",
    ]


def test_undefined_values_and_score_kind_score(tmp_path: Path) -> None:
    path = write(tmp_path / "positives.csv", ["score,label", "3.5,1", "-2,1", "7,"])
    [record] = evaluate_json(path, "--score-kind", "score", "--threshold", "0")
    assert (record["n"], record["n_pos"], record["unlabelled"]) == (2, 2, 1)
    assert record["regular"]["roc_auc"] is None
    assert record["regular"]["fpr"] is None
    assert record["regular"]["recall"] == 0.5
    assert "brier" not in record["regular"]
    assert "reliability" not in record
    done = calmon(path, "--score-kind", "score", "--threshold", "0")
    assert done.returncode == 0
    assert [line.split() for line in done.stdout.splitlines() if line.startswith("roc_auc")] == [
        ["roc_auc", "n/a"]
    ]


def test_only_unlabelled_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "later.csv", ["score,label", "0.5,", "0.25,"])
    [record] = evaluate_json(path)
    assert (record["n"], record["n_pos"], record["unlabelled"], record["prior"]) == (0, 0, 2, None)
    assert set(record["regular"].values()) == {None}


def test_quoted_fields_and_extra_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path / "quoted.csv",
        ['"note","score","label"', '"a, b",0.75,1', '"c",0.25,0', '"multi\nline",0.5,0'],
    )
    [record] = evaluate_json(path, "--threshold", "0.5")
    assert (record["n"], record["n_pos"]) == (3, 1)
    assert record["regular"]["precision"] == 0.5


def test_spaced_labels_and_blank_lines_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "edited.csv"
    path.write_text("score,label\n0.75, 1\n 0.25 ,0 \n0.5,\t0\n\n\n")
    [record] = evaluate_json(path)
    assert (record["n"], record["n_pos"], record["unlabelled"]) == (3, 1, 0)
    assert record["regular"]["roc_auc"] == 1.0


@pytest.mark.parametrize(
    ("content", "options", "line", "reason"),
    [
        ("", [], 1, "empty file: expected a header line such as 'score,label'"),
        ("score,label\n", [], 1, "no data lines after the header"),
        (
            "score\n0.5\n",
            [],
            1,
            "missing column 'label' (header, split at ',': score); --label-column names the"
            " label column, --delimiter the separator",
        ),
        ("p,y\n0.5,1\n", ["--score-column", "prob"], 1, "missing column 'prob' (header, split"),
        ("score,label\n0.5,1\n0.5,1\n0.5,1\nx,1\n", [], 5, "score 'x' is not a number"),
        ("score,label\n0.5,1\nnan,0\n", [], 3, "score 'nan' is not finite"),
        ("score,label\n0.5,1\ninf,0\n", ["--score-kind", "score"], 3, "score 'inf' is not finite"),
        ("score,label\n0.5,1\n0.5,true\n", [], 3, "label 'true' is not 0, 1 or empty"),
        ("score,label\n0.5,1\n0.5,1,0\n", [], 3, "expected 2 fields like the header, found 3"),
        ("score,label\n0.5,1\n\n0.5,0\n\n", [], 3, "empty line"),
        (
            "score,label,timestamp\n0.5,1,2024-03-01T00:00:00\n",
            [],
            2,
            "timestamp '2024-03-01T00:00:00' has no UTC offset (add Z or +HH:MM)",
        ),
        ("score,label,timestamp\n0.5,1,2024-03-01T00:00:00Z\n0.5,1,soon\n", [], 3, None),
        ("score,label,segment\n0.5,1,ok\n0.5,1,not ok\n", [], 3, None),
        ("score,label\n0.5,1\n", ["--window", "1h"], 1, "missing column 'timestamp'"),
        ("score,label\n0.5,1\n", ["--by-segment"], 1, "missing column 'segment'"),
    ],
)
def test_bad_input(
    content: str, options: list[str], line: int, reason: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    done = calmon(path, *options)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"{path}:{line}: ")
    assert done.stderr.count("\n") == 1
    if reason is not None:
        assert reason in done.stderr


def test_probability_out_of_range_on_stdin() -> None:
    done = calmon("-", stdin="score,label\n0.5,1\n1.5,0\n")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("<stdin>:3: score '1.5' is outside [0, 1]")


def test_missing_file(tmp_path: Path) -> None:
    done = calmon(tmp_path / "absent.csv")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{tmp_path / 'absent.csv'}: cannot read: No such file or directory\n"


@pytest.mark.parametrize(
    "options",
    [
        ["--pi0", "1.5"],
        ["--pi0", "0"],
        ["--pi0", "abc"],
        ["--pi0=0.1", "--pi0=0.2", "--pi0=0.3", "--pi0=0.4", "--pi0=0.5", "--pi0=0.6"],
        ["--threshold", "nan"],
        ["--window", "2h"],
        ["--score-kind", "logit"],
        ["--format", "xml"],
    ],
)
def test_bad_options(options: list[str], tmp_path: Path) -> None:
    path = write(tmp_path / "ok.csv", ["score,label", "0.5,1"])
    done = calmon(path, *options)
    assert (done.returncode, done.stdout) == (2, "")
    assert "usage: calmon evaluate" in done.stderr


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("5e-324", "pi0 is 5e-324; each pi0 must be a normal float, not subnormal"),
        ("1e-300", "pi0 is 1e-300; each pi0 must be at least 4.8e-271"),
        ("1", "pi0 is 1.0; each pi0 must be in (0, 1)"),
    ],
)
def test_pi0_refused_by_the_metric_engine_validator(
    value: str, reason: str, tmp_path: Path
) -> None:
    path = write(tmp_path / "ok.csv", ["score,label", "0.5,1"])
    done = calmon(path, "--pi0", value)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"argument --pi0: {reason}" in done.stderr


def test_repeated_pi0_counts_once(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.csv", ["score,label", "0.5,1", "0.25,0"])
    [record] = evaluate_json(path, *["--pi0=0.1", "--pi0=0.2"] * 3)
    assert list(record["calibrated"]) == ["0.1", "0.2"]


def test_console_script(tmp_path: Path) -> None:
    """The installed `calmon` entry point, not just the module."""
    script = Path(sys.executable).with_name("calmon")
    assert script.exists(), "the package must be installed (pip install -e .)"
    path = write(tmp_path / "ok.csv", ["score,label", "0.5,1", "0.25,0", "0.75,0"])
    done = calmon(path, "--format", "json", program=[str(script)])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["n"] == 3


def test_reader_going_away_is_not_an_error(tmp_path: Path) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    lines = ["score,label,timestamp"] + [
        f"0.{i % 10},{i % 2},{(start + timedelta(minutes=5 * i)).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        for i in range(400)
    ]
    path = write(tmp_path / "many.csv", lines)
    with subprocess.Popen(
        [sys.executable, "-m", "calmon.cli", "evaluate", str(path), "--window", "5m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline().startswith(b"window 2024-01-01T00:00Z/")
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 0
    assert stderr == b""


def test_intervals_are_reproducible_with_a_seed(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    labels = rng.random(3_000) < 0.2
    scores = np.clip(rng.normal(np.where(labels, 0.6, 0.4), 0.15), 0, 1)
    lines = ["score,label"] + [
        f"{s!r},{int(y)}" for s, y in zip(scores.tolist(), labels.tolist(), strict=True)
    ]
    path = write(tmp_path / "set.csv", lines)
    options = ["--intervals", "--seed", "7", "--pi0", "0.5"]
    [record] = evaluate_json(path, *options)
    for metric in ("roc_auc", "precision", "average_precision"):
        low, high = record["intervals"]["regular"][metric]
        assert low <= record["regular"][metric] <= high, metric
        assert high - low < 0.1, metric
    low, high = record["intervals"]["calibrated"]["0.5"]["average_precision"]
    assert low <= record["calibrated"]["0.5"]["average_precision"] <= high
    assert evaluate_json(path, *options) == [record]
    table = calmon(path, *options)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    row = lines.index(next(line for line in lines if line.startswith("roc_auc")))
    low, high = record["intervals"]["regular"]["roc_auc"]
    assert lines[row + 1].split() == ["95%", "low", format(low, "#.4g")]
    assert lines[row + 2].split() == ["95%", "high", format(high, "#.4g")]


def test_every_bad_row_is_reported_in_line_order(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.csv",
        [
            "score,label,timestamp,segment",
            "0.5,1,2024-03-01T00:00:00Z,a",
            "0.5,yes,2024-03-01T00:00:00Z,a",
            "x,1,2024-03-01T00:00:00,a",  # two bad fields: the score's reason
            "0.5,1,2024-03-01T00:00:00Z,not ok",
            "0.5,0,2024-03-01T00:00:00Z,b",
            "1.5,0,2024-03-01T00:00:00Z,b",
            "0.5,0,2024-03-01T00:00:00,b",
        ],
    )
    done = calmon(path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"{path}:3: label 'yes' is not 0, 1 or empty",
        f"{path}:4: score 'x' is not a number",
        f"{path}:5: segment 'not ok' is not a valid name (letters, digits and _.:=- , starting"
        " with a letter or digit, at most 64)",
        f"{path}:7: score '1.5' is outside [0, 1] (probability scores; use --score-kind score for"
        " other scores)",
        f"{path}:8: timestamp '2024-03-01T00:00:00' has no UTC offset (add Z or +HH:MM)",
    ]


@pytest.mark.parametrize("quoted", [False, True])
def test_bad_rows_beyond_twenty_are_counted(quoted: bool, tmp_path: Path) -> None:
    lines = ["score,label"]
    for row in range(60):
        lines.append(f"{row / 100},{'maybe' if row % 2 else '1'}")
    lines.append('"0.5",1,0' if quoted else "0.5,1,0")  # a wrong field count: reported alone
    done = calmon(write(tmp_path / "many.csv", lines[:-1]))
    assert (done.returncode, done.stdout) == (2, "")
    reported = done.stderr.splitlines()
    assert len(reported) == 21
    assert reported[:2] == [
        f"{tmp_path / 'many.csv'}:3: label 'maybe' is not 0, 1 or empty",
        f"{tmp_path / 'many.csv'}:5: label 'maybe' is not 0, 1 or empty",
    ]
    assert reported[19].startswith(f"{tmp_path / 'many.csv'}:41: ")
    assert reported[20] == f"{tmp_path / 'many.csv'}: ... and 10 more bad rows"
    # fields in the wrong number stop the reading of values: those rows are the problems
    counts = [*lines[:-1], lines[-1], lines[-1]]
    done = calmon(write(tmp_path / "counts.csv", counts))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{tmp_path / 'counts.csv'}:{line}: expected 2 fields like the header, found 3"
        for line in (62, 63)
    ]


def test_intervals_are_reproducible_without_a_seed(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    labels = rng.random(2_000) < 0.3
    scores = np.clip(rng.normal(np.where(labels, 0.6, 0.4), 0.2), 0, 1)
    lines = ["score,label"] + [
        f"{s!r},{int(y)}" for s, y in zip(scores.tolist(), labels.tolist(), strict=True)
    ]
    path = write(tmp_path / "set.csv", lines)
    [first] = evaluate_json(path, "--intervals")
    assert first["intervals"]["regular"]["average_precision"] is not None
    assert evaluate_json(path, "--intervals") == [first]
    assert evaluate_json(path, "--intervals", "--seed", "0") == [first]
    [other] = evaluate_json(path, "--intervals", "--seed", "1")
    regular, before = other["intervals"]["regular"], first["intervals"]["regular"]
    assert regular["average_precision"] != before["average_precision"]
    # ROC AUC's interval is DeLong's, from the ranking alone: no seed moves it
    assert regular["roc_auc"] == before["roc_auc"]


def test_html_report_needs_a_window_after_the_reference(tmp_path: Path) -> None:
    path = write(
        tmp_path / "one-day.csv",
        ["timestamp;score;label", "2026-11-01T00:00:00Z;0.2;0", "2026-11-01T01:00:00Z;0.8;1"],
    )
    report = tmp_path / "report.html"
    done = calmon(path, "--window", "1d", "--html", report)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"{path}: nothing to compare with the reference: no window after it\n")
    assert not report.exists()
    # without --window the whole file is both, and the semicolons were read from the header
    whole = calmon(path, "--html", report)
    assert whole.returncode == 0, whole.stderr
    assert "the whole file is both the reference and the window" in report.read_text()
