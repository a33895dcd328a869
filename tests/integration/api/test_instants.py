"""Every route that takes an instant answers any instant with an offset, from the first to the
last that Python represents, with a client error or a success: never a server error (an instant
whose UTC form is out of range is cut to UTC's bounds). SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta, timezone

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.scheduler.helpers import create_model

OFFSETS = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
INSTANTS = st.datetimes(timezones=OFFSETS).map(lambda moment: moment.isoformat())
EDGES = ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59+00:00"]
QUERIES = (
    ("GET", "/v1/models/m/windows", ("start", "end")),
    ("GET", "/v1/models/m/calibration", ("window",)),
    ("POST", "/v1/models/m/recompute", ("start", "end")),
)


def _ask(client: TestClient, first: str, second: str) -> list[int]:
    codes = []
    for method, path, names in QUERIES:
        params = dict(zip(names, (first, second), strict=False))
        codes.append(client.request(method, path, params=params).status_code)
    return codes


def test_the_edges_of_the_date_range(client: TestClient) -> None:
    create_model(client, "m")
    for first in EDGES:
        for second in EDGES:
            codes = _ask(client, first, second)
            assert all(code < 500 for code in codes), (first, second, codes)
    # the calibration of a window no record holds is not found, not a server error
    assert _ask(client, EDGES[0], EDGES[0])[1] == 404


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=INSTANTS, second=INSTANTS)
def test_any_instant_is_a_client_error_or_an_answer(
    client: TestClient, first: str, second: str
) -> None:
    if client.get("/v1/models/m").status_code == 404:
        create_model(client, "m")
    codes = _ask(client, first, second)
    assert all(code < 500 for code in codes), (first, second, codes)
