"""Concurrent writers against `calmon api --workers 2` on PostgreSQL, then the database and the
counters checked against every acknowledged answer.

16 client threads, a fixed number of requests each, seeded: prediction batches over a shared
pool of ids (an id always has the same content, so overlapping batches repeat each other),
label batches over shared ids in random orders (some ids always get the same label, others
random ones), model PUTs that change the configuration (threshold and grace, which take, and
`score_kind`/`window`, which the stored predictions freeze) and reads.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from calmon.timeline import iso
from harness.stack import api_workers

THREADS = 16
REQUESTS_PER_THREAD = 60
POOL = 4000
BATCH = 150
LABEL_BATCH = 250
MODEL = "chaos"
#: three days back, inside the default retention period whatever the date of the run
START = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)


def _content(client_id: str) -> tuple[datetime, float, str]:
    """The one content ever sent for ``client_id``: event time, score (up to 9.99), segment."""
    digest = int(hashlib.sha256(client_id.encode()).hexdigest()[:8], 16)
    return START + timedelta(seconds=digest % 86_400), (digest % 1000) / 100, f"s{digest % 3}"


def _fixed_label(client_id: str) -> int:
    return int(client_id.rsplit("-", 1)[1]) % 2


def _contested(client_id: str) -> bool:
    """Ids whose labels are drawn at random (the others always get :func:`_fixed_label`)."""
    return int(client_id.rsplit("-", 1)[1]) % 5 == 0


@dataclass
class Record:
    """What the clients were told."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    acknowledged: set[str] = field(default_factory=set)
    labelled: set[str] = field(default_factory=set)
    sent_predictions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, kind: str, response: httpx.Response) -> None:
        with self.lock:
            self.statuses[(kind, response.status_code)] += 1
            if response.status_code >= 300 and not (kind == "put" and response.status_code == 409):
                self.errors.append(f"{kind} {response.status_code} {response.text[:300]}")


def _send_predictions(client: httpx.Client, chosen: list[str], record: Record) -> None:
    items = []
    for client_id in chosen:
        ts, score, segment = _content(client_id)
        items.append(
            {"id": client_id, "timestamp": ts.isoformat(), "score": score, "segment": segment}
        )
    response = client.post(f"/v1/models/{MODEL}/predictions", json={"predictions": items})
    record.answer("predictions", response)
    if response.status_code == 200:
        body = response.json()
        assert body["new"] + body["duplicates"] == len(chosen), body
        with record.lock:
            record.acknowledged.update(chosen)
            record.sent_predictions += len(chosen)


def _client_work(base: str, seed: int, record: Record) -> None:
    rng = random.Random(seed)
    ids = [f"p-{i}" for i in range(POOL)]
    with httpx.Client(base_url=base, timeout=60) as client:
        for _ in range(REQUESTS_PER_THREAD):
            kind = rng.choices(["predictions", "labels", "put", "read"], [5, 4, 1, 2])[0]
            if kind == "predictions":
                _send_predictions(client, rng.sample(ids, BATCH), record)
            elif kind == "labels":
                chosen = rng.sample(ids, LABEL_BATCH)
                labels = [
                    {"id": i, "label": rng.randint(0, 1) if _contested(i) else _fixed_label(i)}
                    for i in chosen
                ]
                response = client.post(f"/v1/models/{MODEL}/labels", json={"labels": labels})
                record.answer(kind, response)
                if response.status_code == 200:
                    with record.lock:
                        record.labelled.update(chosen)
            elif kind == "put":
                body: dict[str, Any] = rng.choice(
                    [
                        {"score_kind": "score", "threshold": rng.uniform(0, 5), "grace": "5m"},
                        {"score_kind": "score", "threshold": 2.0, "grace": "20m"},
                        {"score_kind": "probability", "window": "5m"},
                        {"score_kind": "score", "window": "1d"},
                    ]
                )
                response = client.put(f"/v1/models/{MODEL}", json=body)
                record.answer(kind, response)
                if response.status_code == 409:
                    assert response.json()["error"]["code"] == "model_has_predictions"
            else:
                path = rng.choice(
                    [
                        f"/v1/models/{MODEL}",
                        "/v1/models",
                        f"/v1/models/{MODEL}/windows?start={iso(START)}"
                        f"&end={iso(START + timedelta(days=2))}",
                    ]
                )
                record.answer(kind, client.get(path))


def _counter(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == MODEL:
                return sample.value
    return 0.0


@pytest.mark.slow
def test_concurrent_writers_lose_nothing_and_the_counters_match(
    postgres_database: str, tmp_path: Path
) -> None:
    (tmp_path / "metrics").mkdir()
    record = Record()
    with api_workers(postgres_database, tmp_path) as (base, _):
        created = httpx.put(f"{base}/v1/models/{MODEL}", json={"score_kind": "score"})
        assert created.status_code == 201, created.text
        with httpx.Client(base_url=base) as client:
            _send_predictions(client, [f"p-{i}" for i in range(BATCH)], record)
        threads = [
            threading.Thread(target=_client_work, args=(base, seed, record))
            for seed in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(thread.is_alive() for thread in threads)
        metrics = httpx.get(f"{base}/metrics").text
        final = httpx.get(f"{base}/v1/models/{MODEL}").json()

    assert not record.errors, record.errors[:5]
    assert not any(status >= 500 for _, status in record.statuses), record.statuses
    assert record.statuses[("predictions", 200)] > 0
    assert record.statuses[("labels", 200)] > 0

    with psycopg.connect(postgres_database) as conn:
        stored = {
            client_id: (ts, score, segment, label)
            for client_id, ts, score, segment, label in conn.execute(
                "SELECT client_id, ts, score, segment, label FROM predictions"
            )
        }
        pending: dict[str, int] = dict(
            conn.execute("SELECT client_id, label FROM pending_labels").fetchall()
        )
        distinct = conn.execute("SELECT count(DISTINCT client_id) FROM predictions").fetchone()
    assert set(stored) == record.acknowledged
    assert distinct == (len(stored),)
    for client_id, (ts, score, segment, _label) in stored.items():
        assert (ts, score, segment) == _content(client_id), client_id
    assert not set(pending) & set(stored)
    for client_id in record.labelled:
        label = stored[client_id][3] if client_id in stored else pending.get(client_id)
        assert label is not None, client_id
        if not _contested(client_id):
            assert label == _fixed_label(client_id), client_id
    # a probability model never holds scores outside [0, 1]
    assert final["score_kind"] == "score"
    assert final["window"] == "1h"

    ingested = _counter(metrics, "calmon_predictions_ingested_total")
    duplicates = _counter(metrics, "calmon_predictions_duplicate_total")
    labels = _counter(metrics, "calmon_labels_ingested_total")
    assert ingested == len(stored)
    assert ingested + duplicates == record.sent_predictions
    labelled_rows = sum(1 for row in stored.values() if row[3] is not None)
    assert labels >= labelled_rows + len(pending)
