"""calmon_client.Monitor against a real calmon API (uvicorn in a thread, SQLite): batching by
size and by age, labels, retries of refused connections, 429 and 503 with their
``Retry-After``, the full-queue policies, partial rejections, invalid arguments, and the
flush at interpreter exit."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest
from calmon_client import Incident, Monitor
from calmon_client._core import PredictionItem, encode_body, prediction_item

from harness.processes import wait_for
from tests.integration.client.servers import MODEL, Server, ServerFactory

CLIENT = Path(__file__).resolve().parents[3] / "client"
#: an event time the server takes (inside the default retention period)
RECENT = datetime.now(UTC) - timedelta(days=1)


def test_batches_by_size_then_flush_sends_the_rest(server: Server) -> None:
    with Monitor(server.url, MODEL, batch_size=100, flush_interval=60) as monitor:
        for i in range(250):
            assert monitor.log(f"tx-{i}", i / 250, timestamp=RECENT, label=i % 2)
        wait_for("two full batches", lambda: monitor.stats().predictions_sent == 200, timeout=10)
        assert server.count() == 200
        assert monitor.stats().requests == 2
        assert monitor.stats().queued == 50
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert server.count() == 250
    assert stats.requests == 3
    assert (stats.predictions_sent, stats.new, stats.duplicates, stats.queued) == (250, 250, 0, 0)
    assert server.stored()["tx-7"] == (7 / 250, 1)


def test_a_batch_goes_once_its_oldest_item_has_waited_flush_interval(server: Server) -> None:
    with Monitor(server.url, MODEL, batch_size=1000, flush_interval=0.3) as monitor:
        started = time.monotonic()
        monitor.log("tx-1", 0.5)
        wait_for("the aged batch", lambda: server.count() == 1, timeout=5, interval=0.02)
        elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 5.0, elapsed


def test_labels_sent_later_reach_their_predictions(server: Server) -> None:
    with Monitor(server.url, MODEL, batch_size=10) as monitor:
        monitor.log("tx-1", 0.9, timestamp=RECENT.isoformat(), segment="country=FR")
        monitor.log("tx-2", 0.1, timestamp=RECENT)
        assert monitor.flush(timeout=10)
        assert monitor.label("tx-1", 1)
        assert monitor.label("tx-2", False)
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert server.stored() == {"tx-1": (0.9, 1), "tx-2": (0.1, 0)}
    assert stats.labels_sent == 2


def test_refused_connections_are_retried_until_the_server_comes(
    start_server: ServerFactory, unused_url: str
) -> None:
    start_server().stop()  # the model exists before the server that the client waits for
    incidents: list[Incident] = []
    monitor = Monitor(
        unused_url, MODEL, batch_size=50, max_retry_delay=0.2, on_error=incidents.append
    )
    for i in range(120):
        monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
    wait_for("retries", lambda: monitor.stats().retries >= 3, timeout=10)
    assert not monitor.flush(timeout=0.1)
    server = start_server(port=int(unused_url.rsplit(":", 1)[1]))
    assert monitor.flush(timeout=15)
    monitor.close()
    assert server.count() == 120
    stats = monitor.stats()
    assert (stats.new, stats.lost, stats.rejected) == (120, 0, 0)
    assert {i.kind for i in incidents} == {"retrying"}
    assert "ConnectError" in incidents[0].message


def test_429_waits_for_retry_after(start_server: ServerFactory) -> None:
    server = start_server(write_rate_limit=1, write_rate_burst=1)
    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, batch_size=10, on_error=incidents.append) as monitor:
        started = time.monotonic()
        for i in range(20):
            monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
        assert monitor.flush(timeout=20)
        elapsed = time.monotonic() - started
        stats = monitor.stats()
    assert server.count() == 20
    assert stats.retries >= 1
    assert {(i.kind, i.status, i.code) for i in incidents} == {
        ("retrying", 429, "too_many_requests")
    }
    # the second batch waited the server's Retry-After (1 s) at least
    assert elapsed >= 1.0, elapsed


def test_503_from_a_busy_database_is_retried(start_server: ServerFactory) -> None:
    server = start_server(sqlite_busy_timeout=0.1)
    incidents: list[Incident] = []
    blocker = sqlite3.connect(server.database, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with Monitor(server.url, MODEL, batch_size=10, on_error=incidents.append) as monitor:
            for i in range(10):
                monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
            wait_for("a 503", lambda: incidents, timeout=10)
            blocker.execute("ROLLBACK")
            assert monitor.flush(timeout=10)
    finally:
        blocker.close()
    assert server.count() == 10
    assert (incidents[0].kind, incidents[0].status, incidents[0].code) == (
        "retrying",
        503,
        "database_busy",
    )


def test_full_queue_drops_and_counts_and_close_counts_the_lost(unused_url: str) -> None:
    incidents: list[Incident] = []
    monitor = Monitor(
        unused_url, MODEL, batch_size=10, max_queue=10, flush_interval=60, on_error=incidents.append
    )
    accepted = sum(monitor.log(f"tx-{i}", 0.5) for i in range(35))
    stats = monitor.stats()
    # at most one batch in flight and a full queue
    assert 10 <= accepted <= 20
    assert stats.dropped == 35 - accepted
    assert sum(i.kind == "dropped" for i in incidents) == 35 - accepted
    started = time.monotonic()
    monitor.close(timeout=0.3)
    assert time.monotonic() - started < 2
    stats = monitor.stats()
    assert (stats.lost, stats.queued, stats.new) == (accepted, 0, 0)
    lost = [i for i in incidents if i.kind == "lost"]
    assert [i.count for i in lost] == [accepted]
    assert not monitor.log("late", 0.5)
    assert monitor.stats().dropped == 36 - accepted


def test_block_policy_waits_for_room_and_loses_nothing(server: Server) -> None:
    with Monitor(
        server.url, MODEL, batch_size=20, max_queue=20, when_full="block", flush_interval=60
    ) as monitor:
        assert all(monitor.log(f"tx-{i}", 0.5, timestamp=RECENT) for i in range(500))
        assert monitor.flush(timeout=20)
        stats = monitor.stats()
    assert server.count() == 500
    assert stats.dropped == 0


def test_block_policy_gives_up_after_block_timeout(unused_url: str) -> None:
    monitor = Monitor(
        unused_url,
        MODEL,
        batch_size=10,
        max_queue=10,
        when_full="block",
        block_timeout=0.1,
        flush_interval=60,
    )
    results = [monitor.log(f"tx-{i}", 0.5) for i in range(20)]
    started = time.monotonic()
    assert not monitor.log("one-more", 0.5)
    assert 0.1 <= time.monotonic() - started < 1.0
    assert monitor.stats().dropped == results.count(False) + 1
    monitor.close(timeout=0.1)


def test_close_releases_a_blocked_caller(unused_url: str) -> None:
    monitor = Monitor(
        unused_url, MODEL, batch_size=10, max_queue=10, when_full="block", flush_interval=60
    )
    for i in range(20):
        monitor.log(f"tx-{i}", 0.5)
    answers: list[bool] = []
    caller = threading.Thread(target=lambda: answers.append(monitor.log("blocked", 0.5)))
    caller.start()
    time.sleep(0.1)
    assert caller.is_alive()
    monitor.close(timeout=0.1)
    caller.join(timeout=5)
    assert answers == [False]


def test_only_the_items_the_server_names_are_rejected(server: Server) -> None:
    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, batch_size=100, on_error=incidents.append) as monitor:
        monitor.log("same", 0.25, timestamp=RECENT)
        assert monitor.flush(timeout=10)
        for i in range(5):
            monitor.log(f"ok-{i}", 0.5, timestamp=RECENT)
        monitor.log("out-of-range", 1.5, timestamp=RECENT)  # a probability model
        monitor.log("bad segment", 0.5, timestamp=RECENT, segment="no spaces")
        monitor.log("same", 0.75, timestamp=RECENT)  # stored earlier with another score
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert set(server.stored()) == {"same", *(f"ok-{i}" for i in range(5))}
    assert server.stored()["same"] == (0.25, None)
    assert (stats.rejected, stats.new) == (3, 6)
    rejected = [i for i in incidents if i.kind == "rejected"]
    assert {(i.status, i.code) for i in rejected} == {
        (422, "validation_error"),
        (409, "prediction_conflict"),
    }
    assert sorted(i for incident in rejected for i in incident.ids) == [
        "bad segment",
        "out-of-range",
        "same",
    ]


def test_a_batch_over_the_body_limit_is_split_until_it_fits(start_server: ServerFactory) -> None:
    server = start_server(max_body_bytes=4096)
    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, batch_size=100, on_error=incidents.append) as monitor:
        for i in range(100):
            monitor.log(f"tx-{i:03d}", 0.5, timestamp=RECENT, segment="country=FR")
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert server.count() == 100
    # as JSON, the 100 predictions (about 10 kB) and both halves of 50 are refused, 4 of 25 are
    # taken (7 requests); an Arrow body is smaller, so fewer splits
    items = [
        prediction_item(f"tx-{i:03d}", 0.5, RECENT, None, "country=FR", 0.0) for i in range(100)
    ]
    assert (stats.new, stats.rejected, stats.requests) == (100, 0, _requests_to_fit(items, 4096))
    assert _requests_to_fit(items, 4096) >= 3
    assert incidents == []


def _requests_to_fit(items: list[PredictionItem], limit: int) -> int:
    """Requests a monitor makes to send ``items`` when every body over ``limit`` bytes is
    refused and split in halves."""
    body, _ = encode_body("predictions", list(items))
    if len(body) <= limit:
        return 1
    half = len(items) // 2
    return 1 + _requests_to_fit(items[half:], limit) + _requests_to_fit(items[:half], limit)


def test_a_refused_token_rejects_the_batch(start_server: ServerFactory) -> None:
    server = start_server(api_tokens="admin-token-0123456789:admin,read-token-0123456789:read")
    incidents: list[Incident] = []
    with Monitor(
        server.url, MODEL, token="read-token-0123456789", on_error=incidents.append
    ) as monitor:
        monitor.log("tx-1", 0.5)
        assert monitor.flush(timeout=10)
        assert monitor.stats().rejected == 1
    assert [(i.kind, i.status, i.code) for i in incidents] == [("rejected", 403, "forbidden")]
    with Monitor(server.url, MODEL, token="admin-token-0123456789") as monitor:
        monitor.log("tx-1", 0.5)
        assert monitor.flush(timeout=10)
    assert server.count() == 1


def test_invalid_arguments_are_counted_not_raised(server: Server) -> None:
    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, on_error=incidents.append) as monitor:
        assert not monitor.log("naive", 0.5, timestamp=datetime(2026, 11, 1, 8, 0))
        assert not monitor.log("nan", float("nan"))
        assert not monitor.log("text", "high")  # type: ignore[arg-type]
        assert not monitor.log("", 0.5)
        assert not monitor.log("label", 0.5, label=2)
        assert not monitor.label("tx", None)  # type: ignore[arg-type]
        assert monitor.flush(timeout=5)
        stats = monitor.stats()
    assert stats.invalid == 6
    assert [i.kind for i in incidents] == ["invalid"] * 6
    assert "aware" in incidents[0].message
    assert server.count() == 0


def test_values_that_cannot_become_numbers_are_counted_not_raised(server: Server) -> None:
    class Unusable:
        def __float__(self) -> float:
            raise RuntimeError("no float")

        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, on_error=incidents.append) as monitor:
        assert not monitor.log("big", 10**400)
        assert not monitor.log("fraction", Fraction(10**400))  # type: ignore[arg-type]
        assert not monitor.log("odd", Unusable())  # type: ignore[arg-type]
        assert not monitor.log(Unusable(), 0.5)  # type: ignore[arg-type]
        assert not monitor.label("odd", Unusable())  # type: ignore[arg-type]
        assert monitor.flush(timeout=5)
        assert monitor.stats().invalid == 5
    assert [i.kind for i in incidents] == ["invalid"] * 5
    assert server.count() == 0
    monitor = Monitor(server.url, MODEL, on_error=incidents.append)
    monitor.log("kept", 0.5, timestamp=RECENT)
    assert monitor.flush(timeout="soon") is True  # type: ignore[arg-type]
    monitor.close(timeout=Unusable())  # type: ignore[arg-type]
    assert monitor.stats().invalid == 2
    assert set(server.stored()) == {"kept"}


def test_one_id_logged_twice_in_a_batch_keeps_the_first(server: Server) -> None:
    incidents: list[Incident] = []
    with Monitor(server.url, MODEL, batch_size=100, on_error=incidents.append) as monitor:
        monitor.log("d", 0.3, timestamp=RECENT)
        monitor.log("e", 0.4, timestamp=RECENT)
        monitor.log("d", 0.9, timestamp=RECENT)
        monitor.log("e", 0.4, timestamp=RECENT)  # the same again: a duplicate
        assert monitor.flush(timeout=10)
        stats = monitor.stats()
    assert server.stored() == {"d": (0.3, None), "e": (0.4, None)}
    assert (stats.new, stats.duplicates, stats.rejected) == (2, 1, 1)
    assert [(i.kind, i.code, i.ids) for i in incidents] == [
        ("rejected", "prediction_conflict", ("d",))
    ]


def test_a_raising_callback_does_not_reach_the_caller(unused_url: str) -> None:
    def callback(_incident: Incident) -> None:
        raise RuntimeError("boom")

    monitor = Monitor(unused_url, MODEL, on_error=callback)
    assert not monitor.log("naive", 0.5, timestamp=datetime(2026, 11, 1))
    monitor.close(timeout=0.1)


def test_the_url_may_end_with_v1(server: Server) -> None:
    with Monitor(f"{server.url}/v1/", MODEL) as monitor:
        monitor.log("tx-1", 0.5)
    assert server.count() == 1


def test_a_bad_configuration_raises_at_construction(unused_url: str) -> None:
    with pytest.raises(ValueError, match="model"):
        Monitor(unused_url, "Not A Name")
    with pytest.raises(ValueError, match="batch_size"):
        Monitor(unused_url, MODEL, batch_size=10_001)
    with pytest.raises(ValueError, match="when_full"):
        Monitor(unused_url, MODEL, when_full="wait")  # type: ignore[arg-type]


def test_what_is_queued_is_sent_at_interpreter_exit(server: Server, tmp_path: Path) -> None:
    script = (
        "from calmon_client import Monitor\n"
        f"monitor = Monitor({server.url!r}, {MODEL!r}, flush_interval=3600)\n"
        "for i in range(30):\n"
        "    monitor.log(f'exit-{i}', 0.5)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert server.count() == 30
