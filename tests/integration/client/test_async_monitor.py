"""calmon_client.AsyncMonitor, the asyncio twin, against a real calmon API: batching, labels,
retries of a refused connection and of 429, the full-queue policies and closing."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from calmon_client import AsyncMonitor, Incident

from tests.integration.client.servers import MODEL, Server, ServerFactory

RECENT = datetime.now(UTC) - timedelta(days=1)


def test_batches_labels_and_flush(server: Server) -> None:
    async def main() -> tuple[int, int]:
        async with AsyncMonitor(server.url, MODEL, batch_size=100, flush_interval=60) as monitor:
            for i in range(250):
                assert await monitor.log(f"tx-{i}", i / 250, timestamp=RECENT)
            assert await monitor.flush(timeout=10)
            assert await monitor.label("tx-3", 1)
            assert await monitor.flush(timeout=10)
            stats = monitor.stats()
            return stats.requests, stats.labels_sent

    requests, labels = asyncio.run(main())
    assert (requests, labels) == (4, 1)
    assert server.count() == 250
    assert server.stored()["tx-3"] == (3 / 250, 1)


def test_a_batch_goes_once_its_oldest_item_has_waited(server: Server) -> None:
    async def main() -> float:
        async with AsyncMonitor(server.url, MODEL, flush_interval=0.3) as monitor:
            started = time.monotonic()
            await monitor.log("tx-1", 0.5)
            while server.count() == 0:
                assert time.monotonic() - started < 5
                await asyncio.sleep(0.02)
            return time.monotonic() - started

    assert 0.3 <= asyncio.run(main()) < 5.0


def test_refused_connections_and_429_are_retried(
    start_server: ServerFactory, unused_url: str
) -> None:
    start_server().stop()
    incidents: list[Incident] = []

    async def main() -> None:
        monitor = AsyncMonitor(
            unused_url, MODEL, batch_size=10, max_retry_delay=0.2, on_error=incidents.append
        )
        for i in range(30):
            await monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
        while monitor.stats().retries < 2:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(
            start_server,
            port=int(unused_url.rsplit(":", 1)[1]),
            write_rate_limit=1,
            write_rate_burst=1,
        )
        assert await monitor.flush(timeout=20)
        await monitor.aclose()
        assert (monitor.stats().new, monitor.stats().lost) == (30, 0)

    asyncio.run(main())
    statuses = {i.status for i in incidents}
    assert {i.kind for i in incidents} == {"retrying"}
    assert None in statuses  # refused connections
    assert 429 in statuses


def test_drop_policy_and_close_count_what_is_lost(unused_url: str) -> None:
    incidents: list[Incident] = []

    async def main() -> None:
        monitor = AsyncMonitor(
            unused_url,
            MODEL,
            batch_size=10,
            max_queue=10,
            flush_interval=60,
            on_error=incidents.append,
        )
        accepted = 0
        for i in range(35):
            accepted += await monitor.log(f"tx-{i}", 0.5)
            await asyncio.sleep(0)
        assert 10 <= accepted <= 20
        assert monitor.stats().dropped == 35 - accepted
        started = time.monotonic()
        await monitor.aclose(timeout=0.3)
        assert time.monotonic() - started < 2
        assert (monitor.stats().lost, monitor.stats().queued) == (accepted, 0)
        assert not await monitor.log("late", 0.5)

    asyncio.run(main())
    assert [i.kind for i in incidents].count("lost") == 1


def test_block_policy_waits_for_room(server: Server) -> None:
    async def main() -> int:
        async with AsyncMonitor(
            server.url, MODEL, batch_size=20, max_queue=20, when_full="block", flush_interval=60
        ) as monitor:
            for i in range(300):
                assert await monitor.log(f"tx-{i}", 0.5, timestamp=RECENT)
            assert await monitor.flush(timeout=20)
            return monitor.stats().dropped

    assert asyncio.run(main()) == 0
    assert server.count() == 300


def test_invalid_arguments_are_counted_not_raised(server: Server) -> None:
    async def main() -> int:
        async with AsyncMonitor(server.url, MODEL) as monitor:
            assert not await monitor.log("naive", 0.5, timestamp=datetime(2026, 11, 1))
            assert not await monitor.label("tx", 7)
            return monitor.stats().invalid

    assert asyncio.run(main()) == 2


def test_unusable_values_and_repeated_ids_never_raise(server: Server) -> None:
    async def main() -> tuple[int, int, int]:
        async with AsyncMonitor(server.url, MODEL, batch_size=100) as monitor:
            assert not await monitor.log("big", 10**400)
            assert not await monitor.log("fraction", Fraction(10**400))  # type: ignore[arg-type]
            assert await monitor.log("d", 0.3, timestamp=RECENT)
            assert await monitor.log("d", 0.9, timestamp=RECENT)
            assert await monitor.flush(timeout=10)
            stats = monitor.stats()
            return stats.invalid, stats.new, stats.rejected

    assert asyncio.run(main()) == (2, 1, 1)
    assert server.stored() == {"d": (0.3, None)}
