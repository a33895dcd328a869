"""Connections cut before the request reaches the server and after the server committed: a
client that retries every batch until it is acknowledged stores each prediction exactly once."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.faults.cutting_proxy import CuttingProxy
from tests.e2e.faults.helpers import (
    MODEL,
    ApiFactory,
    batch_body,
    in_threads,
    send_until_acknowledged,
    stored,
)

pytestmark = pytest.mark.slow

BATCHES = 60
PER_BATCH = 100
CLIENTS = 4


def test_retried_batches_are_stored_exactly_once(
    database_url: str, api_factory: ApiFactory
) -> None:
    api = api_factory(database_url)
    api.start()
    api.create_model()
    proxy = CuttingProxy(api.port, seed=20260105, weights=(0.4, 0.3, 0.3))
    url = f"http://127.0.0.1:{proxy.port}/v1/models/{MODEL}/predictions"
    sent: dict[str, float] = {}
    answers: dict[int, tuple[dict[str, int], int]] = {}
    bodies = {}
    for batch in range(BATCHES):
        bodies[batch], scores = batch_body(batch, PER_BATCH)
        sent |= scores

    def client(index: int) -> None:
        for batch in range(index, BATCHES, CLIENTS):
            answers[batch] = send_until_acknowledged(url, bodies[batch])

    try:
        in_threads(CLIENTS, client)
    finally:
        proxy.close()

    assert proxy.counts["request"] >= 10, proxy.counts
    assert proxy.counts["response"] >= 10, proxy.counts
    outcomes = [answer for answer, _ in answers.values()]
    assert len(outcomes) == BATCHES
    # all or nothing: a batch was either stored by its acknowledged attempt, or by an earlier
    # attempt whose answer was cut, which the acknowledged attempt then found stored
    new = {"new": PER_BATCH, "duplicates": 0, "pending_labels_applied": 0}
    repeat = {"new": 0, "duplicates": PER_BATCH, "pending_labels_applied": 0}
    assert all(outcome in (new, repeat) for outcome in outcomes), outcomes
    assert repeat in outcomes
    assert new in outcomes
    assert sum(attempts for _, attempts in answers.values()) > BATCHES
    count, scores = stored(database_url)
    assert count == len(sent) == BATCHES * PER_BATCH
    assert scores == sent

    # a client that left mid-request is neither a server error nor a rejection
    samples = metric_samples(httpx.get(f"{api.base}/metrics").text)
    route = "/v1/models/{model}/predictions"
    assert samples[("calmon_http_requests_total", route, "2xx")] >= BATCHES
    assert samples[("calmon_http_requests_total", route, "4xx")] >= 1
    assert ("calmon_http_requests_total", route, "5xx") not in samples
    rejected = [v for (name, _, _), v in samples.items() if name == "calmon_ingest_rejected_total"]
    assert rejected
    assert set(rejected) == {0.0}
    assert '"level":"ERROR"' not in api.log.read_text()


def metric_samples(text: str) -> dict[tuple[str, str, str], float]:
    """Samples by (name, route or reason, status) from a Prometheus exposition."""
    return {
        (
            sample.name,
            sample.labels.get("route", sample.labels.get("reason", "")),
            sample.labels.get("status", ""),
        ): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
