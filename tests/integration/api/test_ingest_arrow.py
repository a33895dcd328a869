"""Arrow IPC stream bodies on the ingestion routes, on both backends: stored as the same JSON
batch is, idempotent, all or nothing, and every wrong column, type, null, value or size
refused with the error body of a JSON batch, naming the column (and the row)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from calmon.db.models import Model, Prediction
from calmon.services.ingest_arrow import ARROW_MEDIA_TYPE, MAX_ARROW_BATCH
from tests.integration.api.helpers import create_model, error_of, post_labels, post_predictions
from tests.support.clients import ClientFactory

ARROW = {"content-type": ARROW_MEDIA_TYPE}
T0 = datetime(2024, 5, 1, 8, 0, 0, 123456, tzinfo=UTC)
UTC_US = pa.timestamp("us", tz="UTC")
INT8 = pa.int8()
PREDICTION_SCHEMA = pa.schema(
    [
        ("id", pa.utf8()),
        ("timestamp", UTC_US),
        ("score", pa.float64()),
        ("label", pa.int8()),
        ("segment", pa.utf8()),
    ]
)


def stream(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def predictions_table(
    items: list[dict[str, Any]], schema: pa.Schema = PREDICTION_SCHEMA
) -> pa.Table:
    """The Arrow table of prediction items (absent fields: null)."""
    return pa.table(
        {f.name: pa.array([item.get(f.name) for item in items], f.type) for f in schema},
        schema=schema,
    )


def post_arrow(
    client: TestClient, body: bytes, model: str = "fraud", route: str = "predictions"
) -> Any:
    return client.post(f"/v1/models/{model}/{route}", content=body, headers=ARROW)


def items(n: int, prefix: str = "p") -> list[dict[str, Any]]:
    """``n`` valid predictions: a label on some, a segment on others, distinct instants."""
    return [
        {
            "id": f"{prefix}-{i}",
            "timestamp": T0 + timedelta(minutes=7 * i, microseconds=i),
            "score": (i % 10) / 10 + 0.01,
            "label": [None, 0, 1][i % 3],
            "segment": [None, "country=FR", "device:mobile"][i % 3 if i % 2 else 0],
        }
        for i in range(n)
    ]


def as_json(item: dict[str, Any]) -> dict[str, Any]:
    """The JSON body item of a prediction item (an offset other than UTC: the same instant)."""
    out = {key: value for key, value in item.items() if value is not None}
    out["timestamp"] = item["timestamp"].astimezone(timezone(timedelta(hours=2))).isoformat()
    return out


def stored(client: TestClient, model: str = "fraud") -> dict[str, tuple[Any, ...]]:
    """The stored predictions of ``model`` by id: (ts, score, label, segment, labelled)."""
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        rows = session.scalars(
            select(Prediction)
            .join(Model, Model.id == Prediction.model_id)
            .where(Model.name == model)
        ).all()
        return {
            row.client_id: (row.ts, row.score, row.label, row.segment, row.labelled_at is not None)
            for row in rows
        }


@pytest.fixture
def fraud(client: TestClient) -> TestClient:
    create_model(client, "fraud")
    return client


def test_arrow_batch_is_stored_as_the_json_batch(fraud: TestClient) -> None:
    create_model(fraud, "twin")
    batch = items(60)
    via_json = post_predictions(fraud, [as_json(item) for item in batch], model="twin")
    via_arrow = post_arrow(fraud, stream(predictions_table(batch)))
    assert via_arrow.status_code == 200, via_arrow.text
    assert (
        via_arrow.json()
        == via_json.json()
        == {
            "new": 60,
            "duplicates": 0,
            "pending_labels_applied": 0,
        }
    )
    got = stored(fraud)
    assert got == stored(fraud, "twin")
    assert got["p-4"] == (
        T0 + timedelta(minutes=28, microseconds=4),
        batch[4]["score"],
        0,
        None,
        True,
    )
    assert got["p-5"][2:] == (1, "device:mobile", True)
    assert got["p-3"][2:] == (None, None, False)


def test_optional_columns_may_be_left_out_and_segments_dictionary_encoded(
    fraud: TestClient,
) -> None:
    schema = pa.schema([("id", pa.utf8()), ("timestamp", UTC_US), ("score", pa.float64())])
    batch = items(3)
    assert post_arrow(fraud, stream(predictions_table(batch, schema))).json()["new"] == 3
    assert {row[2:] for row in stored(fraud).values()} == {(None, None, False)}
    table = predictions_table(items(4, "q")).set_column(
        4, "segment", pa.array(["a=1", None, "a=1", "b"]).dictionary_encode()
    )
    assert post_arrow(fraud, stream(table)).json()["new"] == 4
    assert [stored(fraud)[f"q-{i}"][3] for i in range(4)] == ["a=1", None, "a=1", "b"]


def test_dictionary_segments_are_named_at_each_row_using_an_invalid_one(
    fraud: TestClient,
) -> None:
    """A dictionary's entries are checked once each; an invalid one is named at every row that
    uses it (a null row or an entry no row uses is no error), as JSON names the same rows."""
    dictionary = pa.array(["ok", "bad value", "x", "-unused"])
    indices = pa.array([0, 1, None, 1, 2], pa.int8())
    segments = pa.DictionaryArray.from_arrays(indices, dictionary)
    table = predictions_table(items(5, "d")).set_column(4, "segment", segments)
    response = post_arrow(fraud, stream(table))
    assert response.status_code == 422
    fields = [d["field"] for d in error_of(response)["details"]]
    assert fields == ["predictions[1].segment", "predictions[3].segment"]
    assert stored(fraud) == {}
    fine = pa.DictionaryArray.from_arrays(pa.array([0, None, 2, 0, 2], pa.int8()), dictionary)
    response = post_arrow(fraud, stream(table.set_column(4, "segment", fine)))
    assert response.json()["new"] == 5
    assert [stored(fraud)[f"d-{i}"][3] for i in range(5)] == ["ok", None, "x", "ok", "x"]


def test_several_record_batches_make_one_request(fraud: TestClient) -> None:
    table = pa.concat_tables([predictions_table(items(5)), predictions_table(items(5, "r"))])
    assert table.column("id").num_chunks == 2
    assert post_arrow(fraud, stream(table)).json()["new"] == 10
    assert len(stored(fraud)) == 10


def test_retry_is_idempotent_and_other_content_is_409(fraud: TestClient) -> None:
    body = stream(predictions_table(items(20)))
    assert post_arrow(fraud, body).json()["new"] == 20
    before = stored(fraud)
    assert post_arrow(fraud, body).json() == {
        "new": 0,
        "duplicates": 20,
        "pending_labels_applied": 0,
    }
    changed = items(22)
    changed[5]["score"] = 0.99
    response = post_arrow(fraud, stream(predictions_table(changed)))
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "prediction_conflict"
    assert error["details"] == [{"id": "p-5"}]
    assert stored(fraud) == before


def test_conflict_within_an_arrow_batch_is_told(fraud: TestClient) -> None:
    batch = [*items(3), {**items(3)[1], "score": 0.77}]
    response = post_arrow(fraud, stream(predictions_table(batch)))
    assert response.status_code == 409
    assert "within the batch" in error_of(response)["message"]
    assert stored(fraud) == {}


def _segment_ints() -> list[dict[str, Any]]:
    return [{**item, "segment": None} for item in items(2)]


def _schema_with(name: str, arrow_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, arrow_type if f.name == name else f.type) for f in PREDICTION_SCHEMA]
    )


@pytest.mark.parametrize(
    ("table", "field", "error_type"),
    [
        (pa.table({"id": ["a"], "timestamp": pa.array([T0], UTC_US)}), "score", "missing"),
        (
            pa.table(
                {
                    "id": ["a"],
                    "score": [0.5],
                    "timestamp": pa.array([T0], UTC_US),
                    "lable": pa.array([1], pa.int8()),
                }
            ),
            "lable",
            "extra_forbidden",
        ),
        (predictions_table(items(2), _schema_with("score", pa.float32())), "score", "column_type"),
        (predictions_table(items(2), _schema_with("label", pa.int64())), "label", "column_type"),
        (predictions_table(items(2), _schema_with("id", pa.large_utf8())), "id", "column_type"),
        (
            predictions_table(items(2), _schema_with("timestamp", pa.timestamp("ns", tz="UTC"))),
            "timestamp",
            "column_type",
        ),
        (
            predictions_table(items(2), _schema_with("timestamp", pa.timestamp("us"))),
            "timestamp",
            "column_type",
        ),
        (
            predictions_table(
                items(2), _schema_with("timestamp", pa.timestamp("us", tz="Europe/Paris"))
            ),
            "timestamp",
            "column_type",
        ),
        (
            predictions_table(_segment_ints(), _schema_with("segment", pa.int8())),
            "segment",
            "column_type",
        ),
    ],
    ids=[
        "missing",
        "unknown",
        "score-float32",
        "label-int64",
        "id-large",
        "ts-ns",
        "ts-naive",
        "ts-paris",
        "segment-int",
    ],
)
def test_wrong_column_is_422_naming_it(
    fraud: TestClient, table: pa.Table, field: str, error_type: str
) -> None:
    response = post_arrow(fraud, stream(table))
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert [(d["field"], d["type"]) for d in error["details"]] == [(field, error_type)]
    assert field in error["message"]
    assert stored(fraud) == {}


@pytest.mark.parametrize(
    ("change", "field", "error_type"),
    [
        ({"id": None}, "id", "missing"),
        ({"timestamp": None}, "timestamp", "missing"),
        ({"score": None}, "score", "missing"),
        ({"id": "x" * 129}, "id", "string_too_long"),
        ({"id": ""}, "id", "string_pattern_mismatch"),
        ({"id": "tab\there"}, "id", "string_pattern_mismatch"),
        ({"id": "c1\x85"}, "id", "string_pattern_mismatch"),
        ({"score": 1.5}, "score", "less_than_equal"),
        ({"score": -0.01}, "score", "greater_than_equal"),
        ({"score": float("nan")}, "score", "finite_number"),
        ({"score": float("inf")}, "score", "finite_number"),
        ({"label": 2}, "label", "less_than_equal"),
        ({"label": -1}, "label", "greater_than_equal"),
        ({"segment": "*"}, "segment", "string_pattern_mismatch"),
        ({"segment": "a" * 65}, "segment", "string_pattern_mismatch"),
        (
            {"timestamp": datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)},
            "timestamp",
            "greater_than_equal",
        ),
        (
            {"timestamp": timedelta(days=1, minutes=1)},
            "timestamp",
            "less_than_equal",
        ),
    ],
)
def test_invalid_value_is_422_naming_row_and_column(
    fraud: TestClient, change: dict[str, Any], field: str, error_type: str
) -> None:
    batch = items(3)
    batch[1] = {**batch[1], **change}
    if isinstance(change.get("timestamp"), timedelta):  # from the server's clock, at run time
        batch[1]["timestamp"] = datetime.now(UTC) + change["timestamp"]
    response = post_arrow(fraud, stream(predictions_table(batch)))
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert error["message"] == f"1 invalid field: predictions[1].{field}"
    [detail] = error["details"]
    assert (detail["field"], detail["type"]) == (f"predictions[1].{field}", error_type)
    assert stored(fraud) == {}


def test_messages_and_order_are_those_of_json(fraud: TestClient) -> None:
    batch = items(4)
    batch[3] = {**batch[3], "score": 7.0, "id": "y" * 200}
    batch[1] = {**batch[1], "segment": "bad segment", "timestamp": datetime(1960, 1, 1, tzinfo=UTC)}
    via_arrow = error_of(post_arrow(fraud, stream(predictions_table(batch))))
    json_batch = [as_json(item) for item in batch]
    via_json = error_of(post_predictions(fraud, json_batch))
    assert via_arrow == via_json
    assert [d["field"] for d in via_arrow["details"]] == [
        "predictions[1].timestamp",
        "predictions[1].segment",
        "predictions[3].id",
        "predictions[3].score",
    ]


def test_score_models_take_any_finite_score(client: TestClient) -> None:
    create_model(client, "raw", score_kind="score")
    batch = [{**item, "score": 100.0 * (i - 1)} for i, item in enumerate(items(3))]
    assert post_arrow(client, stream(predictions_table(batch)), model="raw").json()["new"] == 3
    batch[0]["score"] = float("-inf")
    response = post_arrow(client, stream(predictions_table(batch)), model="raw")
    assert [d["type"] for d in error_of(response)["details"]] == ["finite_number"]


def test_more_rows_than_the_arrow_limit_is_422(fraud: TestClient) -> None:
    n = MAX_ARROW_BATCH + 1
    table = pa.table(
        {
            "id": pa.array([f"{i:x}" for i in range(n)]),
            "timestamp": pa.array([T0] * n, UTC_US),
            "score": pa.array([0.5] * n),
        }
    )
    response = post_arrow(fraud, stream(table))
    assert response.status_code == 422
    [detail] = error_of(response)["details"]
    assert (detail["field"], detail["type"]) == ("predictions", "too_long")
    assert str(MAX_ARROW_BATCH) in detail["message"]
    assert stored(fraud) == {}


def test_arrow_batches_over_the_json_limit_are_stored(fraud: TestClient) -> None:
    body = stream(predictions_table(items(25_000)))
    response = post_arrow(fraud, body)
    assert response.json() == {"new": 25_000, "duplicates": 0, "pending_labels_applied": 0}
    assert len(stored(fraud)) == 25_000


def test_body_over_the_size_limit_is_413(make_client: ClientFactory) -> None:
    small = make_client(max_body_bytes=4096)
    create_model(small, "fraud")
    body = stream(predictions_table(items(200)))
    assert len(body) > 4096
    response = post_arrow(small, body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"
    assert stored(small) == {}


@pytest.mark.parametrize(
    "body", [b"", b"not arrow at all", b"\xff\xff\xff\xff\x10\x00\x00\x00junk"]
)
def test_body_that_is_no_arrow_stream_is_400(fraud: TestClient, body: bytes) -> None:
    response = post_arrow(fraud, body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_arrow"


def test_invalid_utf8_is_refused(fraud: TestClient) -> None:
    good = stream(predictions_table(items(2)))
    position = good.index(b"p-1")
    broken = good[:position] + b"\xff\xfe\xfd" + good[position + 3 :]
    response = post_arrow(fraud, broken)
    assert response.status_code == 400
    assert "utf" in error_of(response)["message"].lower()
    assert stored(fraud) == {}


class TestLabels:
    def _labels(self, ids: list[Any], labels: list[Any], label_type: pa.DataType = INT8) -> bytes:
        return stream(
            pa.table({"id": pa.array(ids, pa.utf8()), "label": pa.array(labels, label_type)})
        )

    def test_labels_by_arrow(self, fraud: TestClient) -> None:
        post_predictions(fraud, [as_json(item) for item in items(3)])
        response = post_arrow(
            fraud, self._labels(["p-0", "p-1", "p-2", "zz", "p-0"], [0, 0, 1, 1, 1]), route="labels"
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"updated": 1, "unchanged": 2, "pending": ["zz"], "expired": 0}
        labels = {key: row[2] for key, row in stored(fraud).items()}
        assert labels == {"p-0": 1, "p-1": 0, "p-2": 1}

    def test_label_stream_answers_and_stores_as_the_json_batch(self, client: TestClient) -> None:
        """The same labels (repeats of an id whose last copy wins, a relabel, an unchanged
        label, pending ids) by JSON to one model and by Arrow to another: the same answers,
        the same stored labels, and the pending labels applied alike."""
        ids = ["p-0", "p-1", "p-2", "zz", "p-0", "yy", "p-3", "zz", "p-4", "p-3"]
        labels = [0, 0, 1, 1, 1, 0, 0, 0, 1, 1]
        items_json = [{"id": i, "label": v} for i, v in zip(ids, labels, strict=True)]
        answers: dict[str, list[dict[str, Any]]] = {}
        for model, send in (("by-json", "json"), ("by-arrow", "arrow")):
            create_model(client, model)
            post_predictions(client, [as_json(item) for item in items(5)], model=model)
            for _ in range(2):  # the second time: nothing changes
                if send == "json":
                    response = post_labels(client, items_json, model)
                else:
                    response = post_arrow(client, self._labels(ids, labels), model, "labels")
                assert response.status_code == 200, response.text
                answers.setdefault(model, []).append(response.json())
            late = post_predictions(client, [{**as_json(items(1)[0]), "id": "zz"}], model=model)
            assert late.json()["pending_labels_applied"] == 1
        assert answers["by-arrow"] == answers["by-json"]
        assert answers["by-arrow"][0] == {
            "updated": 3,
            "unchanged": 2,
            "pending": ["yy", "zz"],
            "expired": 0,
        }
        assert answers["by-arrow"][1]["updated"] == 0
        as_stored = {
            model: {key: (row[2], row[4]) for key, row in stored(client, model).items()}
            for model in ("by-json", "by-arrow")
        }
        assert as_stored["by-arrow"] == as_stored["by-json"]
        assert as_stored["by-arrow"]["p-0"] == (1, True)
        assert as_stored["by-arrow"]["p-3"] == (1, True)
        assert as_stored["by-arrow"]["zz"] == (0, True)

    @pytest.mark.parametrize(
        ("ids", "labels", "label_type", "field"),
        [
            (["p-0", "p-1"], [1, 3], pa.int8(), "labels[1].label"),
            (["p-0", "p-1"], [1, None], pa.int8(), "labels[1].label"),
            (["p-0", None], [1, 0], pa.int8(), "labels[1].id"),
            (["p-0", "p-1"], [1, 0], pa.int32(), "label"),
        ],
    )
    def test_invalid_labels_change_nothing(
        self,
        fraud: TestClient,
        ids: list[Any],
        labels: list[Any],
        label_type: pa.DataType,
        field: str,
    ) -> None:
        post_predictions(fraud, [as_json(item) for item in items(2)])
        before = stored(fraud)
        response = post_arrow(fraud, self._labels(ids, labels, label_type), route="labels")
        assert response.status_code == 422
        assert [d["field"] for d in error_of(response)["details"]] == [field]
        assert stored(fraud) == before


def test_without_pyarrow_arrow_is_415_and_json_still_served(tmp_path: Path) -> None:
    """A server process where pyarrow cannot be imported (the ``arrow`` extra left out)."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pyarrow"] = None  # what an absent package is to `import`
        from fastapi.testclient import TestClient
        from calmon.api.app import create_app
        from calmon.db import migrate
        from calmon.db.session import create_db_engine
        from calmon.settings import Settings

        settings = Settings(database_url=sys.argv[1], retention_days=0)
        engine = create_db_engine(settings)
        migrate.upgrade(engine)
        engine.dispose()
        with TestClient(create_app(settings)) as client:
            client.put("/v1/models/m", json={})
            arrow = client.post(
                "/v1/models/m/predictions",
                content=bytes.fromhex(sys.argv[2]),
                headers={"content-type": "application/vnd.apache.arrow.stream"},
            )
            item = {"id": "a", "timestamp": "2024-05-01T00:00:00Z", "score": 0.5}
            plain = client.post("/v1/models/m/predictions", json={"predictions": [item]})
            print(arrow.status_code, plain.status_code)
            print(arrow.text)
        """
    )
    body = stream(predictions_table(items(2)))
    done = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{tmp_path / 'db.sqlite'}", body.hex()],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    statuses, answer = done.stdout.splitlines()[:2]
    assert statuses == "415 200"
    assert "pyarrow is not installed" in answer
    assert "calmon[arrow]" in answer
