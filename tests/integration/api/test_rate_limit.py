"""Write requests beyond the configured rate get 429 with Retry-After, store nothing, and are
counted; other tokens, reads and the default (no limit) are untouched."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.api.helpers import error_of, prediction
from tests.support.clients import ClientFactory

WRITER = "writer-token-0123456789"
OTHER = "other-writer-0123456789"
ADMIN = "admin-token-0123456789"


def _auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _rejected(client: TestClient) -> float:
    text = client.get("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "calmon_ingest_rejected_total"
        and sample.labels.get("reason") == "rate_limited"
    )


@pytest.fixture
def limited(make_client: ClientFactory) -> TestClient:
    client = make_client(
        api_tokens=f"{WRITER}:write,{OTHER}:write,{ADMIN}:admin",
        write_rate_limit=0.01,
        write_rate_burst=2,
    )
    assert client.put("/v1/models/m1", json={}, headers=_auth(ADMIN)).status_code == 201
    return client


def test_beyond_the_burst_is_429_and_stores_nothing(limited: TestClient) -> None:
    url = "/v1/models/m1/predictions"
    before = _rejected(limited)
    for i in range(2):
        body = {"predictions": [prediction(f"a{i}")]}
        assert limited.post(url, json=body, headers=_auth(WRITER)).status_code == 200
    refused = limited.post(url, json={"predictions": [prediction("a2")]}, headers=_auth(WRITER))
    assert refused.status_code == 429
    assert error_of(refused)["code"] == "too_many_requests"
    assert 1 <= int(refused.headers["retry-after"]) <= 100
    labels = limited.post(
        "/v1/models/m1/labels", json={"labels": [{"id": "a0", "label": 1}]}, headers=_auth(WRITER)
    )
    assert labels.status_code == 429
    assert _rejected(limited) - before == 1  # the counter is of prediction batches
    # another token has its own bucket; reads are not limited
    again = limited.post(url, json={"predictions": [prediction("a2")]}, headers=_auth(OTHER))
    assert again.json()["new"] == 1
    for _ in range(5):
        assert limited.get("/v1/models/m1", headers=_auth(ADMIN)).status_code == 200
    # the refused prediction was not stored: sending it now is new, not a duplicate
    listed = limited.post(url, json={"predictions": [prediction("a1")]}, headers=_auth(OTHER))
    assert listed.json() == {"new": 0, "duplicates": 1, "pending_labels_applied": 0}


def test_no_limit_by_default(make_client: ClientFactory) -> None:
    client = make_client()
    assert client.put("/v1/models/m1", json={}).status_code == 201
    for i in range(60):
        body = {"predictions": [prediction(f"p{i}")]}
        assert client.post("/v1/models/m1/predictions", json=body).status_code == 200
