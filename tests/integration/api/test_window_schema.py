"""The OpenAPI document describes the window record fully: real records, computed by the
scheduler, validate against the published schema (probability and score models, with and
without a reference, intervals, a split, an estimate and π0 keys), records that break it are
refused by it, and no object of it is open-ended. SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from calmon.scheduler.runner import WindowScheduler
from calmon.settings import Settings
from tests.integration.scheduler.helpers import SettledClock, create_model, make_batch, send


@pytest.fixture
def scheduler(migrated_url: str, clock: SettledClock) -> Iterator[WindowScheduler]:
    """A scheduler on the test's database (ticks run in the test), on the test's clock."""
    settings = Settings(database_url=migrated_url, scheduler_scan_margin=5.0, retention_days=0)
    running = WindowScheduler(settings, instance="schema-test", clock=clock)
    yield running
    running.shutdown()


def _page_validator(document: dict[str, Any]) -> Any:
    """A JSON Schema validator of the windows route's 200 body, as the document publishes it."""
    answer = document["paths"]["/v1/models/{model}/windows"]["get"]["responses"]["200"]
    schema = answer["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator({**schema, "components": document["components"]})


def _errors(validator: Any, body: Any) -> list[str]:
    return [error.message for error in validator.iter_errors(body)]


def _computed_pages(
    clock: SettledClock, client: TestClient, scheduler: WindowScheduler
) -> dict[str, list[Any]]:
    """Raw window pages of three models: probability with π0 and segments, score, and
    probability without π0 whose windows all lack labels of one class."""
    configs: dict[str, dict[str, Any]] = {
        "prob": {
            "pi0": [0.01, 0.5],
            "reference": {"kind": "trailing", "windows": 2},
            "objective": {"target_precision": 0.5},
        },
        "score": {
            "score_kind": "score",
            "objective": {"costs": {"false_positive": 1.0, "false_negative": 5.0}},
        },
        "bare": {},
    }
    for name, config in configs.items():
        create_model(client, name, window="5m", grace="0s", **config)
        batch = make_batch(
            prefix=name,
            start=clock.recent(4),
            count=600,
            spacing=timedelta(seconds=1.5),
            seed=5,
            prior=0.0 if name == "bare" else 0.3,
            segments=["a", None] if name == "prob" else None,
            unlabelled=0.2,
        )
        send(client, name, batch)
    assert scheduler.tick().computed == 9
    pages: dict[str, list[Any]] = {}
    for name in ("prob", "score", "bare"):
        response = client.get(f"/v1/models/{name}/windows", params={"limit": 2})
        assert response.status_code == 200
        pages[name] = [response.json()]
        while pages[name][-1]["next_cursor"] is not None:
            cursor = pages[name][-1]["next_cursor"]
            response = client.get(
                f"/v1/models/{name}/windows", params={"limit": 2, "cursor": cursor}
            )
            pages[name].append(response.json())
    return pages


def test_computed_records_validate_against_the_published_schema(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    validator = _page_validator(client.get("/openapi.json").json())
    pages = _computed_pages(clock, client, scheduler)
    for name, model_pages in pages.items():
        for page in model_pages:
            assert _errors(validator, page) == [], name
    prob = [record for page in pages["prob"] for record in page["windows"]]
    assert len(prob) == 6
    # the cases the schema must cover all occur: no reference yet, then a reference with a
    # split and an estimate; π0 keys; the reliability diagram; a score model without it
    assert any(r["reference"] is None and r["split"] is None for r in prob)
    covered = [r for r in prob if r["split"] is not None and r["estimated"] is not None]
    assert covered
    assert set(covered[0]["calibrated"]) == {"reference", "0.01", "0.5"}
    assert set(covered[0]["estimated"]["calibrated"]) == {"0.01", "0.5"}
    assert covered[0]["intervals"]["regular"]["roc_auc"] is not None
    assert all(r["reliability"] for r in prob)
    scored = [record for page in pages["score"] for record in page["windows"]]
    assert scored
    assert all("reliability" not in r and "brier" not in r["regular"] for r in scored)
    bare = [record for page in pages["bare"] for record in page["windows"]]
    assert all(r["n_pos"] == 0 and r["regular"]["roc_auc"] is None for r in bare)
    # advice: a threshold, or none with a reason (no reference yet, too few labels and a
    # label-free check that does not hold); none without an objective
    assert all(r["advice"]["objective"] == {"target_precision": 0.5} for r in prob)
    assert all((r["advice"]["threshold"] is None) == bool(r["advice"]["reason"]) for r in prob)
    assert any(r["advice"]["reason"] for r in prob)
    assert all(r["advice"] is None for r in bare)


def test_the_schema_refuses_records_that_break_it(
    client: TestClient, scheduler: WindowScheduler, clock: SettledClock
) -> None:
    validator = _page_validator(client.get("/openapi.json").json())
    page = _computed_pages(clock, client, scheduler)["prob"][-1]
    record = page["windows"][-1]
    assert record["split"] is not None
    breakages: dict[str, Callable[[dict[str, Any]], object]] = {
        "unknown field": lambda r: r.update(surprise=1),
        "unknown metric": lambda r: r["regular"].update(accuracy=0.9),
        "metric as text": lambda r: r["regular"].update(f1="0.5"),
        "interval of three": lambda r: r["intervals"]["regular"].update(f1=[0.1, 0.2, 0.3]),
        "missing part": lambda r: r["split"]["average_precision"].pop("likelihood"),
        "bad π0 entry": lambda r: r["calibrated"].update({"0.2": {"precision": 0.5}}),
        "unknown method": lambda r: r["estimated"].update(method="guess"),
        "unknown prior source": lambda r: r["advice"].update(prior_source="guessed"),
        "two objectives": lambda r: r["advice"]["objective"].update(alert_rate=0.1),
        "count as float": lambda r: r.update(n=1.5),
    }
    for name, breaking in breakages.items():
        broken = copy.deepcopy(page)
        breaking(broken["windows"][-1])
        assert _errors(validator, broken), name


def test_every_record_field_is_typed_and_described(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert '"additionalProperties": true' not in json.dumps(document)
    record_parts = [
        "WindowPage",
        "WindowRecord",
        "RegularMetrics",
        "CalibratedMetrics",
        "WindowIntervals",
        "RegularIntervals",
        "CalibratedIntervals",
        "Split",
        "SplitParts",
        "ReferenceSummary",
        "Estimated",
        "EstimatedRegular",
        "EstimatedCalibrated",
        "ReliabilityBin",
        "SegmentsOverflow",
        "Advice",
        "AdviceExpected",
        "AdviceAssumption",
    ]
    for name in record_parts:
        schema = schemas[name]
        assert schema["description"], name
        closed = schema["additionalProperties"]
        assert closed is False or set(closed) == {"$ref"}, name
        for field, part in schema["properties"].items():
            assert part.get("description"), (name, field)
            assert any(key in part for key in ("type", "$ref", "anyOf", "const", "enum")), (
                name,
                field,
            )
    # the maps keyed by π0: a `reference` key always, every key's value of one schema
    for owner, target in (
        ("WindowRecord", "CalibratedMetrics"),
        ("WindowIntervals", "CalibratedIntervals"),
    ):
        keyed = schemas[owner]["properties"]["calibrated"]
        assert keyed["description"], owner
        assert keyed["required"] == ["reference"], owner
        values = keyed["additionalProperties"]["anyOf"]
        assert values == [{"$ref": f"#/components/schemas/{target}"}, {"type": "null"}], owner
    reference = schemas["ReferenceConfig"]
    assert set(reference["properties"]) == {"kind", "windows", "start", "end"}
    assert all(part["description"] for part in reference["properties"].values())


def test_every_operation_has_a_summary_a_description_and_a_telling_id(
    client: TestClient,
) -> None:
    document = client.get("/openapi.json").json()
    ids: set[str] = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            summary = operation["summary"]
            assert summary.lower() not in {"put", "get", "index", "post", "healthz", "readyz"}
            assert len(summary.split()) >= 2, (method, path, summary)
            assert operation["description"], (method, path)
            ids.add(operation["operationId"])
    assert ids == {
        "create_or_replace_model",
        "read_model",
        "list_all_models",
        "send_predictions",
        "send_labels",
        "read_windows",
        "read_calibration",
        "recompute_windows",
        "check_liveness",
        "check_readiness",
    }
