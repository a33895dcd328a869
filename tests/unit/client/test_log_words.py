"""calmon_client's log lines count what they name in whole words: "1 prediction", "2 labels"."""

from __future__ import annotations

import json
import logging

import pytest
from calmon_client._core import Backoff, Batch, Reply, Stats, deliver, label_item, prediction_item

REFUSED = json.dumps(
    {"error": {"code": "validation_error", "message": "bad", "details": []}}
).encode()


@pytest.mark.parametrize(
    ("kind", "count", "words"),
    [("predictions", 1, "1 prediction "), ("predictions", 2, "2 predictions "),
     ("labels", 1, "1 label "), ("labels", 3, "3 labels ")],
)  # fmt: skip
def test_a_refusal_names_its_items_in_the_right_number(
    kind: str, count: int, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    items = [
        prediction_item(f"tx-{i}", 0.5, "2024-05-01T10:00:00Z", None, None, 0.0)
        if kind == "predictions"
        else label_item(f"tx-{i}", 1, 0.0)
        for i in range(count)
    ]
    counts = dict.fromkeys(Stats.__dataclass_fields__, 0)
    steps = deliver(Batch(kind, items), counts, Backoff(), lambda incident: None)  # type: ignore[arg-type]
    next(steps)
    with caplog.at_level(logging.ERROR, logger="calmon_client"), pytest.raises(StopIteration):
        steps.send(Reply(422, REFUSED))
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"the server refused {words}(422" in line
