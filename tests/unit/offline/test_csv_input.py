"""Reading evaluation CSV files: values, accepted variants, and the first bad line of bad ones."""

from __future__ import annotations

import csv
import io
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calmon.offline.csv_input import (
    UNLABELLED,
    EvaluationRows,
    InputError,
    detect_delimiter,
    parse_csv,
)


def parse(
    text: str, *, score_kind: str = "probability", required: tuple[str, ...] = ()
) -> EvaluationRows:
    return parse_csv(text.encode(), score_kind=score_kind, required=required)


def error_of(data: str | bytes, *, score_kind: str = "probability") -> tuple[int, str]:
    raw = data.encode() if isinstance(data, str) else data
    with pytest.raises(InputError) as caught:
        parse_csv(raw, score_kind=score_kind, required=())
    return caught.value.line, caught.value.reason


def test_columns_in_any_order_and_extra_columns_ignored() -> None:
    rows = parse("id,label,extra,score\na,1,x,0.25\nb,0,y,0.75\nc,,z,1\n")
    np.testing.assert_array_equal(rows.scores, [0.25, 0.75, 1.0])
    np.testing.assert_array_equal(rows.labels, [1, 0, UNLABELLED])
    assert rows.scores.dtype == np.float64
    assert rows.timestamps is None
    assert rows.segment_names is None
    assert rows.segment_codes is None


def test_label_spellings() -> None:
    rows = parse("score,label\n0.1,0\n0.2,1\n0.3,0.0\n0.4,1.0\n0.5,\n")
    np.testing.assert_array_equal(rows.labels, [0, 1, 0, 1, UNLABELLED])


def test_crlf_bom_no_final_newline_and_spaces_in_header() -> None:
    data = "\ufeffscore , label\r\n0.5,1\r\n0.125,0".encode()
    rows = parse_csv(data, score_kind="probability")
    np.testing.assert_array_equal(rows.scores, [0.5, 0.125])
    np.testing.assert_array_equal(rows.labels, [1, 0])


@pytest.mark.parametrize(
    "ending",
    ["\n\n", "\n\n\n", "\r\n\r\n", "\n \n\t\n", "\n  ", "\n\n  \n"],
    ids=["one", "two", "crlf", "spaces", "no-final-newline", "mixed"],
)
@pytest.mark.parametrize("quoted", [False, True], ids=["plain", "quoted"])
def test_blank_lines_at_the_end_are_ignored(ending: str, quoted: bool) -> None:
    first = '"0.5",1' if quoted else "0.5,1"
    rows = parse(f"score,label\n{first}\n0.25,0{ending}")
    np.testing.assert_array_equal(rows.scores, [0.5, 0.25])
    np.testing.assert_array_equal(rows.labels, [1, 0])


def test_spaces_around_labels_are_ignored_like_around_scores() -> None:
    text = "score,label\n 0.5 , 1\n0.25,0 \n0.75,\t1.0\t\n0.125, \n0.375,0\n"
    rows = parse(text)
    np.testing.assert_array_equal(rows.scores, [0.5, 0.25, 0.75, 0.125, 0.375])
    np.testing.assert_array_equal(rows.labels, [1, 0, 1, UNLABELLED, 0])
    quoted = parse('score,label,note\n"0.5"," 1","a, b"\n0.25,"0 ",c\n')
    np.testing.assert_array_equal(quoted.labels, [1, 0])


def test_scores_round_trip_exactly() -> None:
    values = np.random.default_rng(3).random(1000).tolist()
    text = "score,label\n" + "".join(f"{value!r},1\n" for value in values)
    np.testing.assert_array_equal(parse(text).scores, values)


def test_score_kind_score_allows_any_finite_real() -> None:
    rows = parse("score,label\n-3.5,0\n1e6,1\n", score_kind="score")
    np.testing.assert_array_equal(rows.scores, [-3.5, 1e6])


def test_timestamps_with_offsets() -> None:
    rows = parse(
        "score,label,timestamp\n"
        "0.1,1,2024-01-01T00:00:00Z\n"
        "0.2,0,2024-01-01T02:00:00+02:00\n"
        "0.3,0,2024-01-01T00:00:00.250000-01:30\n"
    )
    # 2024-01-01T00:00:00Z is 1,704,067,200 s after the epoch (19,723 days).
    assert rows.timestamps is not None
    np.testing.assert_array_equal(rows.timestamps, [1_704_067_200, 1_704_067_200, 1_704_072_600.25])


def test_segments_sorted_with_codes_and_empty() -> None:
    rows = parse(
        "score,label,segment\n0.1,1,country=FR\n0.2,0,\n0.3,0,country=DE\n0.4,1,country=FR\n"
    )
    assert rows.segment_names == ("country=DE", "country=FR")
    assert rows.segment_codes is not None
    np.testing.assert_array_equal(rows.segment_codes, [1, -1, 0, 1])


def test_quoted_file_matches_unquoted() -> None:
    plain = "score,label,segment\n0.5,1,a\n0.25,,b\n"
    quoted = '"score","label","segment","note"\n"0.5","1","a","x, y"\n"0.25","","b","z"\n'
    a, b = parse(plain), parse(quoted)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.segment_names == b.segment_names
    assert a.segment_codes is not None
    assert b.segment_codes is not None
    np.testing.assert_array_equal(a.segment_codes, b.segment_codes)


def test_quoted_file_reports_the_line_a_record_starts_on() -> None:
    text = 'score,label,note\n0.5,1,"two\nlines"\n0.5,7,"x"\n'
    assert error_of(text) == (4, "label '7' is not 0, 1 or empty")


def test_required_optional_column() -> None:
    with pytest.raises(InputError) as caught:
        parse("score,label\n0.5,1\n", required=("timestamp",))
    assert caught.value.line == 1
    assert "missing column 'timestamp'" in caught.value.reason


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("", 1, "empty file"),
        ("\n\n", 1, "empty file"),
        ("score,label\n", 1, "no data lines"),
        ("score,label", 1, "no data lines"),
        ("score,lbl\n0.5,1\n", 1, "missing column 'label'"),
        ("label\n1\n", 1, "missing column 'score'"),
        ("score,label,score\n0.5,1,0.5\n", 1, "column 'score' appears twice"),
        ("score,label\n0.5,1\n0.5\n", 3, "expected 2 fields like the header, found 1"),
        ("score,label\n0.5,1,3\n", 2, "expected 2 fields like the header, found 3"),
        ("score,label\n0.5,1\n\n0.5,1\n", 3, "empty line"),
        ("score,label\n0.5,1\n\n0.5,1\n\n", 3, "empty line"),
        ("score,label\n0.5,1\n  \n0.5,1\n", 3, "empty line"),
        ('score,label\n"0.5",1\n\n0.5,1\n\n', 3, "empty line"),
        ("score,label\n\n\n", 1, "no data lines"),
        ("score,label\n0.5,1\nabc,1\n", 3, "score 'abc' is not a number"),
        ("score,label\n0.5,1\n,1\n", 3, "score is empty"),
        ("score,label\nnan,1\n", 2, "score 'nan' is not finite"),
        ("score,label\n0.5,1\n-inf,1\n", 3, "score '-inf' is not finite"),
        ("score,label\n1e400,1\n", 2, "score '1e400' is not finite"),
        ("score,label\n1.5,1\n", 2, "score '1.5' is outside [0, 1]"),
        ("score,label\n0,1\n-0.01,0\n", 3, "score '-0.01' is outside [0, 1]"),
        ("score,label\n0.5,2\n", 2, "label '2' is not 0, 1 or empty"),
        ("score,label\n0.5,yes\n", 2, "label 'yes' is not 0, 1 or empty"),
        ("score,label\n0.5, 2\n", 2, "label ' 2' is not 0, 1 or empty"),
        ("score,label\n0.5,1\n0.5,1 1\n", 3, "label '1 1' is not 0, 1 or empty"),
        ("score,label\n0.5,1\n 0.5 , \t0.0x \n", 3, "label ' \\t0.0x ' is not 0, 1"),
        ("score,label,timestamp\n0.5,1,yesterday\n", 2, "timestamp 'yesterday' is not ISO 8601"),
        ("score,label,timestamp\n0.5,1,\n", 2, "timestamp is empty"),
        (
            "score,label,timestamp\n0.5,1,2024-01-01T00:00:00Z\n0.5,1,2024-01-01T00:00:00\n",
            3,
            "timestamp '2024-01-01T00:00:00' has no UTC offset",
        ),
        ("score,label,timestamp\n0.5,1,2024-02-30T00:00:00Z\n", 2, "is not ISO 8601"),
        (
            "score,label,timestamp\n0.5,1,2024-01-01T00:00:00Z\n0.5,1,2024-01-01T00:00:00.5Z\n"
            "0.5,1,2024-01-01T00:00:00Z\n0.5,1,2024-01-01 00:00:00\n",
            5,
            "timestamp '2024-01-01 00:00:00' has no UTC offset",
        ),
        ("score,label\n0.5,1\n0.5,1\x00\n", 3, "NUL character"),
        (
            "score,label,timestamp\n0.5,1,2024-01-01T00:00:00Z\n0.5,1,1899-12-31T23:59:59Z\n",
            3,
            "timestamp '1899-12-31T23:59:59Z' is not between 1900 and 9998",
        ),
        (
            "score,label,timestamp\n0.5,1,9998-12-31T23:59:59.5-01:00\n",
            2,
            "timestamp '9998-12-31T23:59:59.5-01:00' is not between 1900 and 9998",
        ),
        (
            "score,label,timestamp\n0.5,1,1900-01-01T00:30:00+01:00\n0.5,1,x\n",
            2,
            "is not between 1900 and 9998",
        ),
        ("score,label,segment\n0.5,1,a\n0.5,1,*\n", 3, "segment '*' is not a valid name"),
        ("score,label,segment\n0.5,1,-a\n", 2, "segment '-a' is not a valid name"),
        ("score,label,segment\n0.5,1," + "a" * 65 + "\n", 2, "is not a valid name"),
        ("score,label,segment\n0.5,1,a b\n", 2, "segment 'a b' is not a valid name"),
    ],
)
def test_bad_files(text: str, line: int, reason: str) -> None:
    found_line, found_reason = error_of(text)
    assert found_line == line
    assert reason in found_reason


def test_invalid_utf8_line() -> None:
    line, reason = error_of(b"score,label\n0.5,1\n0.5,\xff\n")
    assert (line, reason) == (3, "not valid UTF-8")


def test_first_bad_line_wins_across_columns() -> None:
    text = "score,label,segment\n0.5,1,a\nx,1,a\n0.5,5,a\n0.5,1,a\n"
    assert error_of(text) == (3, "score 'x' is not a number")
    text = "score,label,segment\n0.5,1,a\n0.5,1,a\n0.5,5,a\nx,1,a\n"
    assert error_of(text) == (4, "label '5' is not 0, 1 or empty")
    text = "score,label,segment\n0.5,1,a\n0.5,1,a\n0.5,1,#\nx,1,a\n"
    assert error_of(text)[0] == 4


def test_within_scores_the_first_problem_wins() -> None:
    # an out-of-range score before an unparsable one, and the other way round
    assert error_of("score,label\n0.5,1\n2,1\nx,1\n")[0] == 3
    assert error_of("score,label\n0.5,1\nx,1\n2,1\n")[0] == 3
    assert error_of("score,label\n0.5,1\n0.5,1\nnan,1\n3,1\n")[0] == 4


def test_first_bad_line_in_a_large_file() -> None:
    n = 100_000
    lines = ["score,label"] + ["0.5,1"] * n
    lines[77_777] = "0.5,1,"
    assert error_of("\n".join(lines))[0] == 77_778
    lines[77_777] = "0.5,1"
    lines[54_321] = "0.5e,1"
    assert error_of("\n".join(lines)) == (54_322, "score '0.5e' is not a number")


_safe_text = st.text(alphabet="abc ,x\"'\n", max_size=8)


@st.composite
def _csv_rows(draw: st.DrawFn) -> list[tuple[float, str, str, str]]:
    rows = draw(
        st.lists(
            st.tuples(
                st.floats(min_value=0.0, max_value=1.0),
                st.sampled_from(["0", "1", "", "0.0", "1.0"]),
                st.sampled_from(["", "a", "country=FR", "b.c:d-e_f"]),
                _safe_text,
            ),
            min_size=1,
            max_size=30,
        )
    )
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=_csv_rows(), quote_all=st.booleans())
def test_agrees_with_the_csv_module(
    rows: list[tuple[float, str, str, str]], quote_all: bool
) -> None:
    """Any valid file, quoted or not, reads as Python's csv module and float() read it."""
    buffer = io.StringIO()
    writer = csv.writer(
        buffer, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL, lineterminator="\n"
    )
    writer.writerow(["note", "segment", "score", "label"])
    for score, label, segment, note in rows:
        writer.writerow([note, segment, repr(score), label])
    text = buffer.getvalue()
    parsed = parse(text)
    expected = list(csv.DictReader(io.StringIO(text)))
    np.testing.assert_array_equal(parsed.scores, [float(row["score"]) for row in expected])
    codes = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "": UNLABELLED}
    np.testing.assert_array_equal(parsed.labels, [codes[row["label"]] for row in expected])
    assert parsed.segment_names is not None
    assert parsed.segment_codes is not None
    names = [row["segment"] for row in expected]
    decoded = [parsed.segment_names[code] if code >= 0 else "" for code in parsed.segment_codes]
    assert decoded == names


def test_timestamps_agree_with_datetime() -> None:
    stamps = [
        "2023-11-14T22:13:20Z",
        "2023-11-14T22:13:20.5+05:30",
        "1999-12-31T23:59:59.999999-08:00",
        "2024-02-29 12:00:00+00:00",
    ]
    text = "score,label,timestamp\n" + "".join(f"0.5,1,{s}\n" for s in stamps)
    rows = parse(text)
    assert rows.timestamps is not None
    assert rows.timestamps.tolist() == [datetime.fromisoformat(s).timestamp() for s in stamps]


@pytest.mark.parametrize(
    ("header", "delimiter"),
    [
        ("score,label", ","),
        ("score;label", ";"),
        ("score\tlabel", "\t"),
        ("score|label", "|"),
        ("score", ","),
        ("a;b,c;d", ";"),
        ('"x,y";score;label', ";"),
        ("a,b;c,d", ","),
    ],
)
def test_the_delimiter_is_read_from_the_header(header: str, delimiter: str) -> None:
    assert detect_delimiter(header) == delimiter


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_other_delimiters_read_like_commas(sep: str) -> None:
    text = "id,score,label\na,0.25,1\nb,0.75,0\n".replace(",", sep)
    rows = parse(text)
    np.testing.assert_array_equal(rows.scores, [0.25, 0.75])
    np.testing.assert_array_equal(rows.labels, [1, 0])
    quoted = parse_csv(
        f'score{sep}label{sep}note\n0.5{sep}1{sep}"a{sep}b"\n'.encode(), score_kind="probability"
    )
    np.testing.assert_array_equal(quoted.labels, [1])
    assert error_of(f"score{sep}label\n0.5{sep}1{sep}3\n") == (
        2,
        "expected 2 fields like the header, found 3",
    )


def test_a_given_delimiter_wins_over_the_header() -> None:
    data = b"a,b,c;score;label\n1,2,3;0.5;1\n"
    assert detect_delimiter(data.decode().splitlines()[0]) == ","
    rows = parse_csv(data, score_kind="probability", delimiter=";")
    np.testing.assert_array_equal(rows.labels, [1])
    with pytest.raises(InputError) as caught:
        parse_csv(b"score;label\n0.5;1\n", score_kind="probability", delimiter=",")
    assert caught.value.reason == (
        "missing column 'score' (header, split at ',': score;label); --score-column names the"
        " score column, --delimiter the separator"
    )


def test_columns_named_otherwise_in_the_file() -> None:
    columns = {"score": "p", "label": "y", "timestamp": "when", "segment": "score"}
    rows = parse_csv(
        b"y,p,when,score\n1,0.25,2026-01-01T00:00:00Z,FR\n0,0.75,2026-01-01T01:00:00Z,\n",
        score_kind="probability",
        columns=columns,
        required=("timestamp", "segment"),
    )
    np.testing.assert_array_equal(rows.scores, [0.25, 0.75])
    np.testing.assert_array_equal(rows.labels, [1, 0])
    assert rows.segment_names == ("FR",)
    assert rows.timestamps is not None
    with pytest.raises(InputError) as caught:
        parse_csv(b"score,label\n0.5,1\n", score_kind="probability", columns={"score": "p"})
    assert caught.value.reason.startswith(
        "missing column 'p' (header, split at ',': score | label)"
    )
