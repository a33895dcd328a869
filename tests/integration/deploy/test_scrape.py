"""The series contract against real scrapes of the API and the scheduler (SQLite, PostgreSQL).

The contract (``harness/contract.py``) is what the rules and the dashboard are
checked against, so it must say exactly what the processes export. Here the API (the
application `calmon api` serves, through the ASGI client) and the scheduler's endpoint (the
registry `calmon scheduler` serves, on a real HTTP server) are scraped after predictions,
labels, a duplicate, a rejected request, windows computed by a real scheduler tick (with a
segment beyond ``max_segments``) and a failed computation, so that every family has samples.
The ``calmon_`` families with samples, their types, sample names and label names must equal
the contract's, both ways, and each process must export its own share.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import httpx
from prometheus_client import start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from calmon.db.models import Prediction
from calmon.instruments import build_scrape_registry
from calmon.scheduler.instruments import SCHEDULER_REGISTRY
from harness.contract import FAMILIES, SCHEDULER, SERIES
from tests.integration.exporter.test_exporter import _exporter, _populate
from tests.integration.scheduler.helpers import (
    Env,
    create_model,
    make_batch,
    send,
    send_labels,
)


def _families(exposition: str) -> dict[str, Metric]:
    """The calmon families of a scrape that hold samples (an empty family is no series)."""
    return {
        family.name: family
        for family in text_string_to_metric_families(exposition)
        if family.name.startswith("calmon_") and family.samples
    }


@contextmanager
def _scheduler_endpoint() -> Iterator[str]:
    """The scheduler's metrics endpoint as `calmon scheduler` serves it, on a free port."""
    server, thread = start_http_server(
        0, addr="127.0.0.1", registry=build_scrape_registry([SCHEDULER_REGISTRY])
    )
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _exercise(env: Env) -> None:
    """Give every family a sample: windows, labels, a duplicate, a rejection, a failure."""
    scheduler = _populate(env)
    send_labels(env.client, "fraud", {"f3-0": 1, "f3-1": 0})
    repeated = make_batch(
        prefix="again", start=env.clock.recent(2), count=3, spacing=timedelta(seconds=7), seed=3
    )
    send(env.client, "ads", repeated)
    response = env.client.post("/v1/models/ads/predictions", json={"predictions": repeated.items})
    assert response.status_code == 200, response.text
    assert response.json()["duplicates"] == 3
    response = env.client.post("/v1/models/unknown/predictions", json={"predictions": []})
    assert response.status_code == 404, response.text
    # enough positives in window and reference for the intervals of AP's change parts (and
    # for a decision of the window alone), and labels for advice at the window's measured
    # ratio (a cost objective: every quantity)
    create_model(
        env.client,
        "wide",
        window="5m",
        grace="0s",
        objective={"costs": {"false_positive": 1.0, "false_negative": 4.0}},
        decision={"min_positives": 100, "max_span": "7d"},
    )
    for seed, ago in enumerate((3, 2)):
        wide = make_batch(
            prefix=f"wide{ago}",
            start=env.clock.recent(ago),
            count=800,
            spacing=timedelta(seconds=0.3),
            seed=10 + seed,
        )
        send(env.client, "wide", wide)
    # a window half unlabelled after a labelled one: its labels do not measure its ratio, so
    # it has the label-free estimate, with its check (200 scored rows or more)
    create_model(env.client, "unlabelled", window="5m", grace="0s")
    for ago, hidden in ((3, 0.0), (2, 0.5)):
        batch = make_batch(
            prefix=f"unlabelled{ago}",
            start=env.clock.recent(ago),
            count=400,
            spacing=timedelta(seconds=0.5),
            seed=20 + ago,
            unlabelled=hidden,
        )
        send(env.client, "unlabelled", batch)
    create_model(env.client, "broken", window="5m", grace="0s")
    broken = make_batch(
        prefix="broken", start=env.clock.recent(3), count=20, spacing=timedelta(seconds=5), seed=1
    )
    send(env.client, "broken", broken)
    with env.session_factory() as session:
        # not a probability: the computation refuses it (the API would have)
        session.execute(
            update(Prediction)
            .where(
                Prediction.model_id == env.model_id("broken"), Prediction.client_id == "broken-3"
            )
            .values(score=1.5)
        )
        session.commit()
    report = scheduler.tick()
    assert report.failed == 1, report
    assert _exporter(env.client).refresh() is not None


def test_scraped_families_and_samples_are_exactly_the_contract(env: Env) -> None:
    _exercise(env)
    response = env.client.get("/metrics")
    assert response.status_code == 200
    api = _families(response.text)
    with _scheduler_endpoint() as url:
        scheduler = _families(httpx.get(url, timeout=10).text)
    scraped = {**api, **scheduler}

    kinds = {name: family.type for name, family in scraped.items()}
    expected = {name: family.kind for name, family in FAMILIES.items()}
    assert sorted(kinds.keys() - expected.keys()) == [], "exported but not in the contract"
    assert sorted(expected.keys() - kinds.keys()) == [], "in the contract but not exported"
    assert kinds == expected

    labels: dict[str, set[frozenset[str]]] = {}
    for family in scraped.values():
        for sample in family.samples:
            labels.setdefault(sample.name, set()).add(frozenset(sample.labels))
    assert sorted(labels.keys() - SERIES.keys()) == [], "samples not in the contract"
    assert sorted(SERIES.keys() - labels.keys()) == [], "contract samples not exported"
    assert {name: {SERIES[name]} for name in labels} == labels

    assert set(api) == {name for name, family in FAMILIES.items() if "api" in family.processes}
    # in this process the service registry also holds the API's values: compare the rest
    assert set(scheduler) - set(api) == {
        name for name, family in FAMILIES.items() if family.processes == SCHEDULER
    }
    assert "calmon_build_info" in scheduler


def test_the_contract_names_samples_as_queries_use_them() -> None:
    """Counters under ``_total``, histograms under their three suffixes, never bare."""
    for name in (
        "calmon_segments_overflow_total",
        "calmon_window_compute_failures_total",
        "calmon_windows_computed_total",
        "calmon_predictions_duplicate_total",
        "calmon_window_compute_duration_seconds_count",
    ):
        assert name in SERIES, name
    assert SERIES["calmon_window_compute_duration_seconds_bucket"] == {"le"}
    for name in ("calmon_window_compute_duration_seconds", "calmon_predictions_ingested"):
        assert name not in SERIES, name
    for metric in ("best_f1_threshold", "ece", "mce"):
        assert f"calmon_{metric}_lower" not in SERIES, metric
