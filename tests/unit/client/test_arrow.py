"""calmon_client's Arrow bodies: where pyarrow is importable a batch goes as an Arrow IPC
stream of the server's columns (event times parsed to UTC microseconds); as JSON where pyarrow is
absent, where an event time is not Arrow-parsable, and from a 415 on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from calmon_client import _arrow
from calmon_client._core import (
    Backoff,
    Batch,
    Item,
    Post,
    Reply,
    Stats,
    deliver,
    encode,
    encode_body,
    label_item,
    prediction_item,
)

ARROW = "application/vnd.apache.arrow.stream"
PLUS_2 = timezone(timedelta(hours=2))


@pytest.fixture(autouse=True)
def _arrow_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts before any server refused Arrow."""
    monkeypatch.setattr(_arrow, "_refused", [])


def read(body: bytes) -> dict[str, list[Any]]:
    table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    return {name: table.column(name).to_pylist() for name in table.column_names}


def test_predictions_go_as_the_servers_arrow_columns() -> None:
    items: list[Item] = [
        prediction_item(
            "tx-1", 0.25, datetime(2024, 5, 1, 10, 0, 0, 5, tzinfo=PLUS_2), 1, None, 0.0
        ),
        prediction_item("tx-é", 1, "2024-05-01T08:30:00Z", None, "country=FR", 0.0),
    ]
    body, media_type = encode_body("predictions", items)
    assert media_type == ARROW
    table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("id", "string"),
        ("timestamp", "timestamp[us, tz=UTC]"),
        ("score", "double"),
        ("label", "int8"),
        ("segment", "string"),
    ]
    assert read(body) == {
        "id": ["tx-1", "tx-é"],
        "timestamp": [
            datetime(2024, 5, 1, 8, 0, 0, 5, tzinfo=UTC),
            datetime(2024, 5, 1, 8, 30, tzinfo=UTC),
        ],
        "score": [0.25, 1.0],
        "label": [1, None],
        "segment": [None, "country=FR"],
    }


def test_labels_go_as_arrow() -> None:
    body, media_type = encode_body("labels", [label_item("a", 1, 0.0), label_item("b", 0, 0.0)])
    assert media_type == ARROW
    assert read(body) == {"id": ["a", "b"], "label": [1, 0]}


def test_an_event_time_arrow_cannot_parse_sends_the_batch_as_json() -> None:
    items: list[Item] = [prediction_item("tx", 0.5, "2024-05-01T10:00:00", None, None, 0.0)]
    body, media_type = encode_body("predictions", items)
    assert media_type == "application/json"
    assert body == encode("predictions", items)


def test_after_a_415_the_batch_and_the_next_go_as_json() -> None:
    items: list[Item] = [prediction_item("tx", 0.5, "2024-05-01T10:00:00Z", None, None, 0.0)]
    counts = dict.fromkeys(Stats.__dataclass_fields__, 0)
    steps = deliver(Batch("predictions", items), counts, Backoff(), lambda incident: None)
    first = next(steps)
    assert isinstance(first, Post)
    assert first.content_type == ARROW
    refused = json.dumps(
        {"error": {"code": "unsupported_media_type", "message": "", "details": []}}
    )
    again = steps.send(Reply(415, refused.encode()))
    assert isinstance(again, Post)
    assert again.content_type == "application/json"
    assert json.loads(again.body)["predictions"][0]["id"] == "tx"
    with pytest.raises(StopIteration):
        steps.send(Reply(200, b'{"new": 1, "duplicates": 0, "pending_labels_applied": 0}'))
    assert (counts["new"], counts["rejected"], counts["requests"]) == (1, 0, 2)
    assert encode_body("predictions", items)[1] == "application/json"


def test_without_pyarrow_batches_go_as_json() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pyarrow"] = None  # what an absent package is to `import`
        from calmon_client._core import encode_body, label_item
        print(encode_body("labels", [label_item("a", 1, 0.0)]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == """(b'{"labels":[{"id":"a","label":1}]}', 'application/json')"""
