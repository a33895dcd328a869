"""The OpenAPI document says what the API answers: schemathesis against a real server.

Requests generated from the document, valid and invalid, go to uvicorn serving the app
(the server is checked to serve that same document). Every answer must have a
documented status, content type and body; no request may fail on the server; a request the
schema takes must be accepted (2xx, or a status that depends on state or credentials, such as
401, 403, 404, 409 or 429) and one it refuses must be refused.

The server is reached three ways: open (no token configured; on each backend), with a
``write`` token under a tight write rate (403 on the other routes, 429 after a few writes),
and with an unknown token (401). Ingestion, window and recompute requests go to one model
created first: a ``score`` model with weekly windows, so that neither the [0, 1] bound of
probability scores nor the window count of a recompute range, which the schema cannot tie to
a model, applies. Rules that JSON Schema cannot say are kept by the generated data rather
than left out of the checks: event times lie between the epoch and the server's clock (see
:func:`event_times`), and the rules of :func:`respect_unsayable_rules`. The servers run with
retention off, so the epoch is the earliest event time: schemathesis also sends fixed instants
of its own (such as 2000-01-01), which a retention period would refuse.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pyarrow as pa
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi import unregister_string_format
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from calmon.api.app import create_app
from calmon.services.ingest_arrow import ARROW_MEDIA_TYPE
from calmon.services.model_registry import MAX_DECISION_SPAN_DAYS, duration_seconds, format_duration
from calmon.settings import Settings
from calmon.timeline import WINDOW_SECONDS
from harness.processes import wait_for
from tests.support.databases import empty_postgres, upgraded
from tests.support.servers import server_started

MODEL = "contract"
#: what PUT generates is sent here, never to MODEL
PUT_MODEL = "contract-put"
ADMIN = "contract-admin-0123456789"
WRITER = "contract-writer-0123456789"
#: settings of each way in, and the token sent (None: no Authorization header)
ACCESS: dict[str, tuple[dict[str, Any], str | None]] = {
    "open": ({}, None),
    "writer": (
        {
            "api_tokens": f"{ADMIN}:admin,{WRITER}:write",
            "write_rate_limit": 0.001,
            "write_rate_burst": 5,
        },
        WRITER,
    ),
    "stranger": ({"api_tokens": f"{ADMIN}:admin"}, "unknown-token-0123456789"),
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    positive_data_acceptance,
]
SCHEMATHESIS_CONFIG = {
    "operations": [
        {"include-path-regex": r"^/v1/models/\{model\}/", "parameters": {"path.model": MODEL}},
        {"include-name": "PUT /v1/models/{model}", "parameters": {"path.model": PUT_MODEL}},
    ],
}


def event_times() -> st.SearchStrategy[str]:
    """RFC 3339 instants of the last 30 days, with any offset: ingestion takes them (from the
    epoch to a day past the server's clock), and any two are at most 10,000 windows apart
    whatever the window, as the start and end of a fixed reference must be."""
    last = datetime.now(UTC).replace(tzinfo=None)
    offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
    return st.builds(
        lambda instant, offset: instant.replace(tzinfo=UTC).astimezone(offset).isoformat(),
        st.datetimes(min_value=last - timedelta(days=30), max_value=last),
        offsets,
    )


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


@st.composite
def arrow_predictions(draw: st.DrawFn) -> bytes:
    """Arrow IPC streams of 1 to 20 valid predictions (event times as :func:`event_times`,
    any finite score, labels and segments with nulls): what the Arrow media type of the
    ingestion routes takes. :func:`respect_unsayable_rules` makes a label stream of one for the
    labels route."""
    last = datetime.now(UTC).replace(tzinfo=None)
    n = draw(st.integers(1, 20))

    def column(values: st.SearchStrategy[Any]) -> list[Any]:
        return draw(st.lists(values, min_size=n, max_size=n))

    characters = st.characters(codec="utf-8", categories=["L", "N", "P"])
    ids = column(st.text(characters, min_size=1, max_size=40))
    stamps = column(st.datetimes(min_value=last - timedelta(days=30), max_value=last))
    table = pa.table(
        {
            "id": pa.array(ids, pa.utf8()),
            "timestamp": pa.array(
                [stamp.replace(tzinfo=UTC) for stamp in stamps], pa.timestamp("us", "UTC")
            ),
            "score": pa.array(column(st.floats(allow_nan=False, allow_infinity=False))),
            "label": pa.array(column(st.sampled_from([None, 0, 1])), pa.int8()),
            "segment": pa.array(
                column(st.sampled_from([None, "country=FR", "a", "x.y:z_1-2"])), pa.utf8()
            ),
        }
    )
    return _stream(table)


def _as_labels(body: bytes) -> bytes:
    """The label stream of a prediction stream: its ids, each labelled 1 if its score is
    positive (a label stream already: itself, as a case may be replayed)."""
    table = pa.ipc.open_stream(body).read_all()
    if "score" not in table.column_names:
        return body
    scores = table.column("score").to_pylist()
    labels = pa.array([int(score > 0) for score in scores], pa.int8())
    return _stream(pa.table({"id": table.column("id"), "label": labels}))


def _negated_body(case: schemathesis.Case[Any]) -> bool:
    """Whether schemathesis meant the case's body to break its schema."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_negative:
        return False
    body = meta.components.get(ParameterLocation.BODY)
    return body is not None and body.mode.is_negative


def _with_wrong_id_type(body: bytes) -> bytes:
    """An Arrow stream whose ``id`` column is ``large_utf8``, which the routes refuse (422)."""
    table = pa.ipc.open_stream(body).read_all()
    ids = table.column("id").cast(pa.large_utf8())
    return _stream(table.set_column(table.schema.get_field_index("id"), "id", ids))


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _ordered(container: Any) -> None:
    if not isinstance(container, dict):
        return
    start, end = _instant(container.get("start")), _instant(container.get("end"))
    if start is None or end is None or start < end:
        return
    if start == end:
        container["end"] = (end + timedelta(seconds=1)).isoformat()
    else:
        container["start"], container["end"] = container["end"], container["start"]


def _whole(container: Any, key: str) -> None:
    if isinstance(container, dict):
        value = container.get(key)
        if isinstance(value, float) and value.is_integer():
            container[key] = int(value)


def _span(body: dict[str, Any]) -> None:
    """A decision's ``max_span`` moved into [one window of the body's window, 90 days], its
    ``min_span`` to at most 90 days."""
    decision = body.get("decision")
    if not isinstance(decision, dict):
        return
    high = MAX_DECISION_SPAN_DAYS * 86_400
    if isinstance(decision.get("min_span"), str):
        try:
            least = duration_seconds(decision["min_span"])
        except ValueError:
            least = 0
        if least > high:
            decision["min_span"] = format_duration(high)
    if not isinstance(decision.get("max_span"), str):
        return
    window = body.get("window")
    low = WINDOW_SECONDS[window if isinstance(window, str) and window in WINDOW_SECONDS else "1h"]
    try:
        seconds = duration_seconds(decision["max_span"])
    except ValueError:
        return
    if not low <= seconds <= high:
        decision["max_span"] = format_duration(min(max(seconds, low), high))


def respect_unsayable_rules(case: schemathesis.Case[Any]) -> None:
    """Make the generated data keep the rules that JSON Schema cannot say.

    ``start`` comes before ``end`` where both are instants (the window query, a recompute range, a
    fixed reference): a rule between two fields. A decision's ``max_span`` is at least one of the
    model's windows (another rule between two fields) and at most 90 days (its digits do not say
    it); its ``min_span`` at most 90 days. The integers of a model's configuration are written
    without a fraction: pydantic's strict integers refuse ``20.0``, which JSON Schema 2020-12 cannot
    tell from ``20``. An Arrow body of the labels route is the label stream of the drawn predictions
    (one media type has one strategy, :func:`arrow_predictions`); where schemathesis means the body
    to be invalid, which a binary schema cannot say, its ``id`` column gets a wrong type.
    """
    _ordered(case.query)
    if case.media_type == ARROW_MEDIA_TYPE and isinstance(case.body, bytes):
        if case.path.endswith("/labels"):
            case.body = _as_labels(case.body)
        if _negated_body(case):
            case.body = _with_wrong_id_type(case.body)
    if isinstance(case.body, dict):
        _ordered(case.body.get("reference"))
        _span(case.body)
        _whole(case.body, "max_segments")
        _whole(case.body.get("reference"), "windows")
        _whole(case.body.get("decision"), "min_positives")


def _document() -> dict[str, Any]:
    """The OpenAPI document of the app, built without serving it: schemathesis' loader from
    a fixture does not run under pytest 9, so the schema is loaded at import and each server
    is checked to serve this document."""
    app = create_app(Settings(database_url="sqlite://"), lifespan_hooks=[])
    document: dict[str, Any] = app.openapi()
    app.state.engine.dispose()
    return document


DOCUMENT = _document()
schemathesis.openapi.media_type(ARROW_MEDIA_TYPE, arrow_predictions())
schema = schemathesis.openapi.from_dict(
    DOCUMENT, config=schemathesis.Config.from_dict(SCHEMATHESIS_CONFIG)
)


@dataclass(frozen=True)
class Api:
    """A served API: where, and the headers each request carries."""

    url: str
    headers: dict[str, str]


def _free_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _database(request: pytest.FixtureRequest, backend: str) -> str:
    """An empty database at the latest schema: a new SQLite file, or the session's PostgreSQL
    database emptied of all rows."""
    if backend == "postgresql":
        url: str = request.getfixturevalue("shared_postgres_url")
        empty_postgres(url)
        return url
    tmp_path_factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    return upgraded(f"sqlite:///{tmp_path_factory.mktemp('contract') / 'calmon.db'}")


@pytest.fixture(
    scope="module",
    params=[
        ("open", "sqlite"),
        ("open", "postgresql"),
        ("writer", "sqlite"),
        ("stranger", "sqlite"),
    ],
    ids="-".join,
)
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The app on uvicorn on a free local port, serving :data:`DOCUMENT`, with :data:`MODEL`
    created; credentials are checked before the database is used, so only the open server runs
    on both backends."""
    access, backend = request.param
    overrides, token = ACCESS[access]
    url = _database(request, backend)
    app = create_app(Settings(database_url=url, retention_days=0, **overrides))
    server = uvicorn.Server(
        uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", ws="none")
    )
    sock = _free_socket()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(
            "the server to start", lambda: server_started(server, thread), timeout=10, interval=0.01
        )
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert httpx.get(f"{url}/openapi.json").json() == DOCUMENT
        response = httpx.put(
            f"{url}/v1/models/{MODEL}",
            json={"score_kind": "score", "window": "7d"},
            headers={"authorization": f"Bearer {ADMIN}"},
        )
        assert response.status_code == 201, response.text
        yield Api(url=url, headers={"authorization": f"Bearer {token}"} if token else {})
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module", autouse=True)
def _event_times() -> Iterator[None]:
    """Draw date-time values where ingestion takes them."""
    schemathesis.openapi.format("date-time", event_times())
    yield
    unregister_string_format("date-time")


# slow: a property-based run of every operation (the full run; not the fast loop)
@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_the_api_answers_as_its_openapi_document_says(
    case: schemathesis.Case[Any], api: Api
) -> None:
    respect_unsayable_rules(case)
    case.call_and_validate(base_url=api.url, headers=api.headers, checks=CHECKS)


#: the scope each ``/v1`` operation needs, as its security requirement names it
SCOPES = {
    ("put", "/v1/models/{model}"): "admin",
    ("get", "/v1/models/{model}"): "read",
    ("get", "/v1/models"): "read",
    ("post", "/v1/models/{model}/predictions"): "write",
    ("post", "/v1/models/{model}/labels"): "write",
    ("get", "/v1/models/{model}/windows"): "read",
    ("get", "/v1/models/{model}/calibration"): "read",
    ("post", "/v1/models/{model}/recompute"): "admin",
}


def test_every_v1_operation_declares_the_optional_bearer_scheme_with_its_scope() -> None:
    schemes = DOCUMENT["components"]["securitySchemes"]
    assert schemes == {"bearer": {**schemes["bearer"], "type": "http", "scheme": "bearer"}}
    v1_operations = set()
    for path, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            expected: list[dict[str, list[str]]] | None = None
            if path.startswith("/v1/"):
                v1_operations.add((method, path))
                expected = [{"bearer": [SCOPES[method, path]]}, {}]
            assert operation.get("security") == expected, path
    assert v1_operations == set(SCOPES)


def test_documentation_samples_are_realistic() -> None:
    """ReDoc and Swagger UI build their samples from the schema: without examples they show
    the bound of a range (a π0 of 4.8e-271) or the word "string" for an id."""
    schemas = DOCUMENT["components"]["schemas"]
    assert schemas["ModelConfig"]["properties"]["pi0"]["examples"] == [[0.01, 0.1]]
    prediction = schemas["PredictionIn"]["properties"]
    assert prediction["id"]["examples"] == ["tx-1"]
    assert prediction["score"]["examples"] == [0.93]
    segment = prediction["segment"]["anyOf"][0]
    assert segment["examples"] == ["country=FR"]


@pytest.mark.parametrize(
    ("route", "rows"),
    [
        (
            "predictions",
            [
                "| `id` | `utf8` | yes | no |",
                "| `timestamp` | `timestamp[us, tz=UTC]` | yes | no |",
                "| `score` | `float64` | yes | no |",
                "| `label` | `int8` | no | yes |",
                "| `segment` | `utf8` | no | yes |",
            ],
        ),
        ("labels", ["| `id` | `utf8` | yes | no |", "| `label` | `int8` | yes | no |"]),
    ],
)
def test_ingestion_routes_list_the_arrow_stream_with_its_columns_and_bound(
    route: str, rows: list[str]
) -> None:
    body = DOCUMENT["paths"][f"/v1/models/{{model}}/{route}"]["post"]["requestBody"]
    assert list(body["content"]) == ["application/json", ARROW_MEDIA_TYPE]
    assert body["content"][ARROW_MEDIA_TYPE] == {"schema": {"type": "string", "format": "binary"}}
    table = [line for line in body["description"].splitlines() if line.startswith("| `")]
    assert [line.rsplit(" | ", 1)[0] + " |" for line in table] == rows
    assert "up to 100,000 rows" in body["description"]
