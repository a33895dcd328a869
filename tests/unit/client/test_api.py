"""``calmon_client.Api``: one request at a time, retried with the monitor's back-off, refusals
raised with the server's code and message; the paths, queries and bodies it sends, against a
mock transport (tests/unit/simulation and the end-to-end tests run it against the server)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from calmon_client import Api, ApiError, ModelConfigMismatchError, ModelError
from calmon_client._core import MAX_BATCH

Answer = httpx.Response | Exception


class Server:
    """A mock transport answering from a list, recording what it was asked."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def api(self, **options: object) -> Api:
        client = httpx.Client(
            transport=httpx.MockTransport(self),
            base_url="http://calmon.test",
            headers={"Authorization": "Bearer t"},
        )
        return Api(client=client, **options)  # type: ignore[arg-type]

    def seen(self) -> list[str]:
        return [f"{r.method} {r.url.path}?{r.url.query.decode()}" for r in self.requests]


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses between attempts, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr("calmon_client._sync.time.sleep", slept.append)
    return slept


def _error(status: int, code: str, message: str, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message, "details": []}}
    return httpx.Response(status, json=body, headers=headers)


def test_failures_that_may_pass_are_retried_with_the_monitor_s_backoff(
    pauses: list[float],
) -> None:
    server = Server(
        [
            httpx.ConnectError("refused"),
            _error(503, "unavailable", "busy"),
            _error(429, "rate_limited", "slow down", **{"Retry-After": "2"}),
            _error(500, "internal", "oops"),
            httpx.Response(200, json={"name": "m"}),
        ]
    )
    api = server.api(attempts=5)
    assert api.request("GET", "/v1/models/m") == (200, {"name": "m"})
    assert server.seen() == ["GET /v1/models/m?"] * 5
    assert all(r.headers["authorization"] == "Bearer t" for r in server.requests)
    # 0.1 s · 2^k drawn in [50 %, 100 %]; a Retry-After is obeyed (plus 0 to 25 %)
    assert 0.05 <= pauses[0] <= 0.1
    assert 0.1 <= pauses[1] <= 0.2
    assert 2.0 <= pauses[2] <= 2.5
    assert 0.4 <= pauses[3] <= 0.8
    assert len(pauses) == 4


def test_a_refusal_raises_at_once_with_the_server_s_code_and_message(
    pauses: list[float],
) -> None:
    server = Server([_error(409, "conflict", "ids exist with other content")])
    with pytest.raises(ApiError, match="409 conflict: ids exist with other content") as caught:
        server.api().post_predictions("m", [{"id": "a", "timestamp": "x", "score": 0.5}])
    assert len(server.requests) == 1
    assert pauses == []
    error = caught.value
    assert (error.status, error.code) == (409, "conflict")
    assert error.reason == "conflict: ids exist with other content"
    assert error.url == "http://calmon.test/v1/models/m/predictions"
    assert not error.transient


def test_attempts_are_bounded(pauses: list[float]) -> None:
    server = Server([httpx.ReadTimeout("slow")] * 4)
    with pytest.raises(ApiError, match="no usable answer after 4 attempts") as caught:
        server.api(attempts=4).get_model("m")
    assert len(server.requests) == 4
    assert len(pauses) == 3
    assert caught.value.status is None
    assert caught.value.reason.startswith("ReadTimeout: slow")
    assert caught.value.transient


def test_a_retried_status_that_persists_is_transient(pauses: list[float]) -> None:
    server = Server([_error(503, "unavailable", "busy")] * 2)
    with pytest.raises(ApiError) as caught:
        server.api(attempts=2).get_model("m")
    assert caught.value.status == 503
    assert caught.value.reason == "503 busy"
    assert caught.value.transient


def test_windows_follow_the_cursor_only_as_far_as_the_iteration_goes() -> None:
    first = {"windows": [{"start": "a"}, {"start": "b"}], "next_cursor": "c1"}
    second = {"windows": [{"start": "c"}], "next_cursor": None}
    server = Server([httpx.Response(200, json=first), httpx.Response(200, json=second)])
    api = server.api()
    start = datetime(2026, 11, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    records = api.windows("m", segment="*", start=start, end="2026-11-02T00:00:00Z", page=2)
    assert next(records) == {"start": "a"}
    assert len(server.requests) == 1
    assert [r["start"] for r in records] == ["b", "c"]
    first_query = dict(server.requests[0].url.params)
    assert first_query == {
        "limit": "2",
        "segment": "*",
        "start": "2026-11-01T12:00:00Z",
        "end": "2026-11-02T00:00:00Z",
    }
    assert dict(server.requests[1].url.params) == {**first_query, "cursor": "c1"}


def test_instants_must_be_aware() -> None:
    with pytest.raises(ValueError, match="aware"):
        Server([]).api().recompute("m", start=datetime(2026, 1, 1), end="2026-01-02T00:00:00Z")


def test_batches_and_recompute_send_what_the_api_takes() -> None:
    server = Server(
        [
            httpx.Response(200, json={"new": 2, "duplicates": 1}),
            httpx.Response(200, json={"new": 0, "duplicates": 1}),
            httpx.Response(200, json={"updated": 1, "unchanged": 0, "pending": 0, "expired": 0}),
            httpx.Response(202, json={"windows": 3}),
        ]
    )
    api = server.api()
    rows = [{"id": f"p{i}", "timestamp": "2026-11-01T00:00:00Z", "score": 0.5} for i in range(3)]
    assert api.post_predictions("m", rows) == (2, 1)
    assert api.post_predictions("m", b'{"predictions":[]}') == (0, 1)
    assert api.post_labels("m", [{"id": "p0", "label": 1}])["updated"] == 1
    start = datetime(2026, 11, 1, tzinfo=UTC)
    assert api.recompute("m", start=start, end=start + timedelta(hours=1)) == {"windows": 3}
    assert server.seen() == [
        "POST /v1/models/m/predictions?",
        "POST /v1/models/m/predictions?",
        "POST /v1/models/m/labels?",
        "POST /v1/models/m/recompute?start=2026-11-01T00%3A00%3A00Z&end=2026-11-01T01%3A00%3A00Z",
    ]
    assert json.loads(server.requests[0].content) == {"predictions": rows}
    assert server.requests[1].content == b'{"predictions":[]}'
    assert json.loads(server.requests[2].content) == {"labels": [{"id": "p0", "label": 1}]}
    assert server.requests[0].headers["content-type"] == "application/json"


def test_a_batch_over_the_server_s_limit_is_refused_before_sending() -> None:
    server = Server([])
    rows = [{"id": "x", "label": 0}] * (MAX_BATCH + 1)
    with pytest.raises(ValueError, match="at most 10000"):
        server.api().post_labels("m", rows)
    assert server.requests == []


def test_a_model_name_stays_one_path_segment() -> None:
    server = Server([_error(404, "not_found", "Not Found")])
    with pytest.raises(ApiError) as caught:
        server.api().get_model("a/b?c")
    assert server.requests[0].url.raw_path == b"/v1/models/a%2Fb%3Fc"
    assert caught.value.reason == "not_found: Not Found"


def test_put_and_ensure_model() -> None:
    stored = {"name": "m", "window": "1h"}
    server = Server(
        [
            httpx.Response(201, json=stored),
            httpx.Response(200, json=stored),
            httpx.Response(200, json=stored),
        ]
    )
    api = server.api()
    assert api.put_model("m", config={"window": "1h"}).created
    assert not api.put_model("m", config={"window": "1h"}).created
    with pytest.raises(ModelConfigMismatchError) as caught:
        api.ensure_model("m", config={"window": "5m"})
    assert caught.value.differences == {"window": ("5m", "1h")}
    assert isinstance(caught.value, ApiError)
    assert server.seen() == ["PUT /v1/models/m?", "PUT /v1/models/m?", "GET /v1/models/m?"]
    assert json.loads(server.requests[0].content) == {"window": "1h"}


def test_ensure_model_gives_up_with_a_model_error(pauses: list[float]) -> None:
    server = Server([httpx.ConnectError("refused")] * 2)
    with pytest.raises(ModelError, match="no usable answer after 2 attempts"):
        server.api(attempts=2).ensure_model("m")


def test_its_own_client_goes_to_the_root_with_the_token() -> None:
    with Api("http://calmon.test:8000/v1/", token="secret", timeout=7.0) as api:
        assert str(api.http.base_url) == "http://calmon.test:8000"
        assert api.http.headers["authorization"] == "Bearer secret"
        assert api.http.timeout.read == 7.0
    assert api.http.is_closed
    given = httpx.Client(base_url="http://calmon.test")
    with Api(client=given):
        pass
    assert not given.is_closed
    given.close()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "either url or client"),
        ({"url": "http://a", "client": httpx.Client()}, "either url or client"),
        ({"client": httpx.Client(), "token": "t"}, "token"),
        ({"url": "http://a", "attempts": 0}, "attempts"),
    ],
)
def test_bad_options(options: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Api(**options)  # type: ignore[arg-type]
