"""`calmon api --workers 2` on PostgreSQL: every scrape adds up the counters of both workers."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness.stack import api_workers
from tests.e2e.test_serve_quickstart import RECENT

BATCHES = 24
PER_BATCH = 50


def _ingested(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "calmon_predictions_ingested_total":
                return sample.value
    return 0.0


def test_two_workers_share_their_counters(postgres_database: str, tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    with api_workers(postgres_database, tmp_path) as (base, _):
        assert httpx.put(f"{base}/v1/models/w", json={}).status_code == 201
        for b in range(BATCHES):
            body = {
                "predictions": [
                    {"id": f"{b}-{i}", "timestamp": RECENT, "score": 0.5} for i in range(PER_BATCH)
                ]
            }
            # a new connection per request, so both workers take some
            response = httpx.post(f"{base}/v1/models/w/predictions", json=body)
            assert response.json()["new"] == PER_BATCH
        workers_with_values = {p.name.rsplit("_", 1)[-1] for p in metrics_dir.glob("counter_*.db")}
        assert len(workers_with_values) >= 2, workers_with_values
        for _ in range(6):
            assert _ingested(httpx.get(f"{base}/metrics").text) == BATCHES * PER_BATCH
            time.sleep(0.05)
