"""The I/O-free parts of calmon_client: back-off and Retry-After, the queue's batching rule,
the checks of what callers log, and the request bodies."""

from __future__ import annotations

import email.utils
import json
import random
import time
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from calmon_client._core import (
    Backoff,
    InvalidItemError,
    Queue,
    described,
    encode,
    label_item,
    parse_retry_after,
    prediction_item,
    root_url,
    wait_seconds,
)


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(first=0.1, cap=2.0, rng=random.Random(1))
    for attempt, ceiling in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.6), (5, 2.0), (60, 2.0)]:
        delays = [backoff.delay(attempt) for _ in range(200)]
        assert min(delays) >= ceiling / 2
        assert max(delays) <= ceiling
        # jittered: not all the same, spread over the range
        assert max(delays) - min(delays) > ceiling / 4


def test_retry_after_is_obeyed_with_up_to_a_quarter_more() -> None:
    backoff = Backoff(first=0.1, cap=0.5, rng=random.Random(2))
    delays = [backoff.delay(0, "3") for _ in range(200)]
    assert min(delays) >= 3.0
    assert max(delays) <= 3.75
    assert max(delays) - min(delays) > 0.3
    assert backoff.delay(0, "100000") <= 300 * 1.25


def test_retry_after_as_seconds_or_http_date() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-3") == 0.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    moment = email.utils.parsedate_to_datetime(later).timestamp()
    before = time.time()
    seconds = parse_retry_after(later)
    after = time.time()
    # the date less the moment it was read: between the date less the clock before and after
    assert seconds is not None
    assert moment - after <= seconds <= moment - before
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after(None) is None


def test_a_batch_is_due_by_size_by_age_or_when_eager() -> None:
    queue = Queue(batch_size=3, flush_interval=10.0, max_queue=6)
    assert queue.due_in(0.0, eager=False) is None
    assert queue.put("predictions", prediction_item("a", 0.1, None, None, None, 100.0))
    assert queue.due_in(104.0, eager=False) == pytest.approx(6.0)
    assert queue.due_in(104.0, eager=True) == 0.0
    assert queue.take(104.0, eager=False) is None
    assert not queue.put("predictions", prediction_item("b", 0.1, None, None, None, 101.0))
    assert queue.put("predictions", prediction_item("c", 0.1, None, None, None, 102.0))
    assert queue.due_in(104.0, eager=False) == 0.0
    batch = queue.take(104.0, eager=False)
    assert batch is not None
    assert [item[0] for item in batch.items] == ["a", "b", "c"]
    assert queue.stats({}).queued == 3  # in flight
    queue.settle(batch)
    assert queue.flushed({"predictions": 3, "labels": 0})
    queue.put("labels", label_item("a", 1, 200.0))
    assert queue.due_in(205.0, eager=False) == pytest.approx(5.0)
    assert queue.due_in(210.0, eager=False) == 0.0
    labels = queue.take(210.0, eager=False)
    assert labels is not None
    assert labels.kind == "labels"


def test_the_queue_is_bounded_and_abandon_counts_everything_lost() -> None:
    queue = Queue(batch_size=2, flush_interval=1.0, max_queue=4)
    for i in range(4):
        queue.put("predictions", prediction_item(f"p{i}", 0.5, None, None, None, 0.0))
    assert queue.full()
    assert queue.take(0.0, eager=False) is not None
    assert not queue.full()
    queue.put("labels", label_item("p0", 0, 0.0))
    assert queue.abandon() == 5
    assert queue.stats({}).lost == 5
    assert queue.flushed(dict(queue.queued))


def test_bad_queue_settings_raise() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Queue(batch_size=0, flush_interval=1.0, max_queue=10)
    with pytest.raises(ValueError, match="flush_interval"):
        Queue(batch_size=1, flush_interval=0.0, max_queue=10)
    with pytest.raises(ValueError, match="max_queue"):
        Queue(batch_size=10, flush_interval=1.0, max_queue=5)


def test_what_callers_log_becomes_what_the_api_takes() -> None:
    paris = timezone(timedelta(hours=2))
    item = prediction_item(
        "tx", np.float32(0.25), datetime(2026, 11, 1, 10, tzinfo=paris), True, "c=FR", 0.0
    )
    assert item[:5] == ("tx", "2026-11-01T10:00:00+02:00", 0.25, 1, "c=FR")
    assert type(item[2]) is float
    before = datetime.now(UTC)
    now = prediction_item("tx", 1, None, None, None, 0.0)
    after = datetime.now(UTC)
    stamp = datetime.fromisoformat(now[1])
    assert stamp.utcoffset() == timedelta(0)
    assert before <= stamp <= after
    assert prediction_item("tx", 0.5, "2026-11-01T08:00:00Z", 0.0, None, 0.0)[1:4] == (
        "2026-11-01T08:00:00Z",
        0.5,
        0,
    )
    body = json.loads(encode("predictions", [item, now]))
    assert body["predictions"][0] == {
        "id": "tx",
        "timestamp": "2026-11-01T10:00:00+02:00",
        "score": 0.25,
        "label": 1,
        "segment": "c=FR",
    }
    assert set(body["predictions"][1]) == {"id", "timestamp", "score"}
    assert json.loads(encode("labels", [label_item("tx", 0, 0.0)])) == {
        "labels": [{"id": "tx", "label": 0}]
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, 0.5, None, None, None), "id"),
        (("", 0.5, None, None, None), "id"),
        (("a", True, None, None, None), "number"),
        (("a", "0.5", None, None, None), "number"),
        (("a", float("inf"), None, None, None), "finite"),
        (("a", 0.5, datetime(2026, 11, 1), None, None), "aware"),
        (("a", 0.5, 1_700_000_000, None, None), "timestamp"),
        (("a", 0.5, None, 2, None), "label"),
        (("a", 0.5, None, "1", None), "label"),
        (("a", 0.5, None, None, 3), "segment"),
    ],
)
def test_invalid_predictions(args: tuple[Any, ...], message: str) -> None:
    client_id, score, timestamp, label, segment = args
    with pytest.raises(InvalidItemError, match=message):
        prediction_item(client_id, score, timestamp, label, segment, 0.0)


class Unfloatable:
    """A value whose conversions raise what no check expects."""

    def __float__(self) -> float:
        raise RuntimeError("no float here")

    def __repr__(self) -> str:
        raise RuntimeError("no repr here")


class Offsetless(tzinfo):
    """A time zone whose offset cannot be read."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        raise RuntimeError("no offset here")

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "nowhere"


@pytest.mark.parametrize(
    "args",
    [
        ("a", 10**400, None, None, None),
        ("a", Fraction(10**400), None, None, None),
        ("a", Unfloatable(), None, None, None),
        ("a", 0.5, datetime(2026, 1, 1, tzinfo=Offsetless()), None, None),
        ("a", 0.5, None, Unfloatable(), None),
        (Unfloatable(), 0.5, None, None, None),
    ],
)
def test_unusable_values_raise_only_invalid_item(args: tuple[Any, ...]) -> None:
    client_id, score, timestamp, label, segment = args
    with pytest.raises(InvalidItemError):
        prediction_item(client_id, score, timestamp, label, segment, 0.0)


def test_unusable_labels_and_ids_raise_only_invalid_item() -> None:
    for label in (Unfloatable(), 10**400, Fraction(10**400)):
        with pytest.raises(InvalidItemError):
            label_item("a", label, 0.0)
    with pytest.raises(InvalidItemError):
        label_item(Unfloatable(), 1, 0.0)
    assert described(Unfloatable()) == "<unprintable Unfloatable>"
    assert len(described("x" * 1000)) == 100


def test_a_batch_never_sends_one_id_twice_and_keeps_the_order() -> None:
    """The server refuses every copy of an id sent twice in one request with other content,
    and keeps the first across requests: a later copy waits for the next batch."""
    queue = Queue(batch_size=3, flush_interval=1.0, max_queue=10)
    for client_id, score in (("d", 0.3), ("e", 0.4), ("d", 0.9), ("f", 0.5), ("d", 0.1)):
        queue.put("predictions", prediction_item(client_id, score, None, None, None, 0.0))
    sent = []
    while (batch := queue.take(0.0, eager=True)) is not None:
        sent.append([(item[0], item[2]) for item in batch.items])
        queue.settle(batch)
    assert sent == [[("d", 0.3), ("e", 0.4), ("f", 0.5)], [("d", 0.9)], [("d", 0.1)]]
    assert queue.size() == 0
    assert queue.flushed(dict(queue.queued))


def test_the_url_is_the_server_root() -> None:
    assert root_url("http://h:8000") == "http://h:8000"
    assert root_url("http://h:8000/") == "http://h:8000"
    assert root_url("http://h:8000/v1/") == "http://h:8000"
    assert root_url("https://h/calmon/v1") == "https://h/calmon"


def test_a_timeout_is_seconds_or_the_default_never_an_error() -> None:
    assert wait_seconds(None, 30.0) == (30.0, None)
    assert wait_seconds(2, None) == (2.0, None)
    assert wait_seconds(-1.0, None) == (0.0, None)
    assert wait_seconds(float("inf"), 5.0) == (None, None)
    for unusable in ("10", float("nan"), Unfloatable(), 10**400, True):
        seconds, problem = wait_seconds(unusable, 5.0)
        assert seconds == 5.0
        assert problem is not None
        assert "timeout" in problem
