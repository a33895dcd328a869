"""The service's own metrics on /metrics, request ids, and JSON logs."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from calmon import __version__
from calmon.instruments import REJECT_OTHER, REJECT_REASONS
from calmon.log import JsonFormatter, configure_logging
from tests.integration.api.helpers import create_model, post_labels, post_predictions, prediction
from tests.support.clients import ClientFactory


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_ingest_counters_move_by_what_happened(client: TestClient) -> None:
    create_model(client, "obs")
    before = _samples(client)
    post_predictions(client, [prediction(f"p{i}") for i in range(7)], model="obs")
    post_predictions(client, [prediction("p0"), prediction("p7")], model="obs")
    post_labels(client, [{"id": "p1", "label": 1}, {"id": "zz", "label": 0}], model="obs")
    post_predictions(client, [prediction("p0", 0.9)], model="obs")
    post_predictions(client, [{"id": "bad"}], model="obs")
    post_predictions(client, [prediction("x")], model="missing")
    after = _samples(client)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("calmon_predictions_ingested_total", model="obs") == 8
    assert delta("calmon_predictions_duplicate_total", model="obs") == 1
    assert delta("calmon_labels_ingested_total", model="obs") == 2
    assert delta("calmon_ingest_rejected_total", reason="conflict") == 1
    assert delta("calmon_ingest_rejected_total", reason="invalid") == 1
    assert delta("calmon_ingest_rejected_total", reason="unknown_model") == 1
    assert _value(after, "calmon_build_info", version=__version__) == 1
    route = "/v1/models/{model}/predictions"
    assert delta("calmon_http_requests_total", route=route, method="POST", status="2xx") == 2
    assert delta("calmon_http_requests_total", route=route, method="POST", status="4xx") == 3
    assert delta("calmon_http_request_duration_seconds_count", route=route, method="POST") == 5
    assert not any(name.endswith("_created") for name, _ in after)


def test_labels_counter_counts_only_labels_that_changed_something(client: TestClient) -> None:
    create_model(client, "obs")
    post_predictions(client, [prediction("a"), prediction("b", label=1)], model="obs")
    before = _samples(client)
    first = post_labels(
        client,
        [
            {"id": "a", "label": 0},
            {"id": "b", "label": 1},
            {"id": "p", "label": 1},
            {"id": "q", "label": 0},
        ],
        model="obs",
    )
    assert first.json() == {"updated": 1, "unchanged": 1, "pending": ["p", "q"], "expired": 0}
    middle = _samples(client)
    again = post_labels(
        client,
        [
            {"id": "a", "label": 0},
            {"id": "b", "label": 0},
            {"id": "p", "label": 1},
            {"id": "q", "label": 1},
            {"id": "r", "label": 1},
        ],
        model="obs",
    )
    assert again.json() == {"updated": 1, "unchanged": 1, "pending": ["p", "q", "r"], "expired": 0}
    rejected = post_labels(client, [{"id": "a", "label": 1}, {"id": "c", "label": 5}], "obs")
    assert rejected.status_code == 422
    after = _samples(client)
    name = "calmon_labels_ingested_total"
    # first: a set, p and q newly pending; b repeats its label
    assert _value(middle, name, model="obs") - _value(before, name, model="obs") == 3
    # again: b changed, q's pending label replaced, r newly pending; a and p are repeats
    assert _value(after, name, model="obs") - _value(middle, name, model="obs") == 3


def test_unmatched_paths_share_one_label(client: TestClient) -> None:
    for path in ("/a", "/b/c", "/v1/models/x/y/z"):
        client.get(path)
    labels = {
        dict(key)["route"] for key in (k[1] for k in _samples(client)) if dict(key).get("route")
    }
    assert "unmatched" in labels
    assert not {"/a", "/b/c", "/v1/models/x/y/z"} & labels


def test_request_id_is_echoed_or_generated(client: TestClient) -> None:
    given = client.get("/healthz", headers={"x-request-id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    made = client.get("/healthz")
    other = client.get("/healthz")
    assert len(made.headers["x-request-id"]) == 32
    assert made.headers["x-request-id"] != other.headers["x-request-id"]
    unsafe = client.get("/healthz", headers={"x-request-id": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"] != "bad id\twith spaces"


def test_access_log_is_one_json_object_with_request_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="calmon.access")
    client.get("/v1/models", headers={"x-request-id": "req-42"})
    records = [r for r in caplog.records if r.name == "calmon.access"]
    assert records
    line = JsonFormatter().format(records[-1])
    assert "\n" not in line
    payload = json.loads(line)
    assert payload["request_id"] == "req-42"
    assert payload["route"] == "/v1/models"
    assert payload["status"] == 200
    assert payload["level"] == "INFO"
    assert isinstance(payload["duration_ms"], float)


def test_request_bodies_are_not_logged(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    create_model(client, "obs")
    post_predictions(client, [prediction("secret-client-id-77")], model="obs")
    post_predictions(client, [{"id": "secret-client-id-78"}], model="obs")
    formatter = JsonFormatter()
    text = "\n".join(formatter.format(r) for r in caplog.records)
    assert "secret-client-id" not in text


def test_configure_logging_is_idempotent() -> None:
    configure_logging("INFO")
    configure_logging("WARNING")
    root = logging.getLogger()
    assert sum(isinstance(h.formatter, JsonFormatter) for h in root.handlers) == 1
    assert root.level == logging.WARNING
    configure_logging("INFO")


def test_rejections_before_routing_are_counted(make_client: ClientFactory) -> None:
    client = make_client(max_body_bytes=1024)
    create_model(client, "obs")
    before = _samples(client)
    body = json.dumps({"predictions": [prediction(f"id-{i}") for i in range(30)]}).encode()
    response = client.post(
        "/v1/models/obs/predictions", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    client.post("/v1/models/obs/predictions", content=b"{}", headers={"content-type": "text/csv"})
    after = _samples(client)
    for reason in ("too_large", "unsupported_media_type"):
        assert (
            _value(after, "calmon_ingest_rejected_total", reason=reason)
            - _value(before, "calmon_ingest_rejected_total", reason=reason)
            == 1
        )


def test_answers_before_routing_are_counted_under_their_route(make_client: ClientFactory) -> None:
    client = make_client(max_body_bytes=1024)
    create_model(client, "obs")
    before = _samples(client)
    big = json.dumps({"predictions": [prediction(f"id-{i}") for i in range(30)]}).encode()
    json_type = {"content-type": "application/json"}
    response = client.post("/v1/models/obs/predictions", content=big, headers=json_type)
    assert response.status_code == 413
    assert client.put("/v1/models/obs", content=big, headers=json_type).status_code == 413
    assert client.post("/v1/models/obs/labels", content=big, headers=json_type).status_code == 413
    assert client.post("/not/a/route", content=big, headers=json_type).status_code == 413
    malformed = {**json_type, "content-length": "many"}
    response = client.post("/v1/models/obs/labels", content=b"{}", headers=malformed)
    assert response.status_code == 400
    after = _samples(client)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    requests = "calmon_http_requests_total"
    predictions = "/v1/models/{model}/predictions"
    labels = "/v1/models/{model}/labels"
    assert delta(requests, route=predictions, method="POST", status="4xx") == 1
    assert delta(requests, route="/v1/models/{model}", method="PUT", status="4xx") == 1
    assert delta(requests, route=labels, method="POST", status="4xx") == 2
    assert delta(requests, route="unmatched", method="POST", status="4xx") == 1
    duration = "calmon_http_request_duration_seconds_count"
    assert delta(duration, route=labels, method="POST") == 2
    assert delta(duration, route="unmatched", method="POST") == 1


def test_rejections_count_the_predictions_of_the_request(client: TestClient) -> None:
    create_model(client, "obs")
    post_predictions(client, [prediction("p0")], model="obs")
    before = _samples(client)
    conflict = [prediction("p0", 0.9), prediction("p1"), prediction("p2")]
    assert post_predictions(client, conflict, model="obs").status_code == 409
    invalid = [prediction(f"q{i}") for i in range(4)] + [{"id": "bad"}]
    assert post_predictions(client, invalid, model="obs").status_code == 422
    missing = [prediction("r0"), prediction("r1")]
    assert post_predictions(client, missing, model="absent").status_code == 404
    cut = client.post(
        "/v1/models/obs/predictions",
        content=b'{"predictions": [',
        headers={"content-type": "application/json"},
    )
    assert cut.status_code == 400
    assert post_labels(client, [{"id": "p0", "label": 7}], model="obs").status_code == 422
    after = _samples(client)

    def delta(reason: str) -> float:
        return _value(after, "calmon_ingest_rejected_total", reason=reason) - _value(
            before, "calmon_ingest_rejected_total", reason=reason
        )

    assert delta("conflict") == 3
    assert delta("invalid") == 5
    assert delta("unknown_model") == 2
    assert delta("invalid_json") == 1


def test_every_rejection_reason_is_exported_at_zero_from_start_up(client: TestClient) -> None:
    """rate() needs a sample before the first rejection, so every reason has a series."""
    samples = _samples(client)
    exported = {
        dict(labels)["reason"] for name, labels in samples if name == "calmon_ingest_rejected_total"
    }
    assert exported >= {*REJECT_REASONS.values(), REJECT_OTHER}


def test_rejections_of_arrow_streams_count_their_rows(client: TestClient) -> None:
    import pyarrow as pa

    from tests.integration.api.test_ingest_arrow import ARROW, items, predictions_table, stream

    create_model(client, "obs")
    before = _samples(client)
    batch = items(6)
    batch[4]["score"] = 3.0
    route = "/v1/models/obs/predictions"
    assert (
        client.post(route, content=stream(predictions_table(batch)), headers=ARROW).status_code
        == 422
    )
    wrong = (
        predictions_table(items(4))
        .drop_columns(["score"])
        .append_column("score", pa.array([1] * 4))
    )
    assert client.post(route, content=stream(wrong), headers=ARROW).status_code == 422
    assert client.post(route, content=b"\xff\xff\xff\xffjunk", headers=ARROW).status_code == 400
    after = _samples(client)

    def delta(reason: str) -> float:
        return _value(after, "calmon_ingest_rejected_total", reason=reason) - _value(
            before, "calmon_ingest_rejected_total", reason=reason
        )

    assert delta("invalid") == 10
    assert delta("invalid_json") == 1
