"""The I/O-free part of ``ensure_model``: the requests it makes for each answer, its retries,
and what counts as the same configuration (the client's copies of server constants:
test_server_copies.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Generator
from typing import Any

import pytest
from calmon_client._core import (
    Backoff,
    Call,
    ModelConfigMismatchError,
    ModelError,
    ModelInfo,
    Pause,
    Reply,
    config_differences,
    ensure_steps,
    model_config,
    transient,
)

Steps = Generator[Call | Pause, Reply | None, ModelInfo]
MODEL = {"name": "m", "window": "1h", "threshold": 0.5, "grace": "10m", "pi0": [0.01, 0.1]}


def _error(status: int, code: str) -> Reply:
    return Reply(status, json.dumps({"error": {"code": code, "message": code}}).encode())


def _run(steps: Steps, replies: list[Reply]) -> tuple[list[Call | Pause], ModelInfo]:
    """Drive ``steps`` with ``replies`` (one per request); the steps taken and the result."""
    taken: list[Call | Pause] = []
    answers = iter(replies)
    step = next(steps)
    while True:
        taken.append(step)
        try:
            step = steps.send(next(answers) if isinstance(step, Call) else None)
        except StopIteration as done:
            return taken, done.value


def _steps(config: dict[str, Any] | None = None, attempts: int = 5) -> Steps:
    return ensure_steps("m", config, Backoff(rng=random.Random(0)), attempts)


def test_a_missing_model_is_put_and_an_existing_one_only_read() -> None:
    created = Reply(201, json.dumps(MODEL).encode())
    taken, info = _run(_steps({"window": "1h"}), [_error(404, "model_not_found"), created])
    assert taken == [
        Call("GET", "/v1/models/m"),
        Call("PUT", "/v1/models/m", b'{"window":"1h"}'),
    ]
    assert (info.created, info.model["window"]) == (True, "1h")
    # found: one GET, nothing written
    taken, info = _run(_steps({"window": "1h"}), [Reply(200, json.dumps(MODEL).encode())])
    assert (len(taken), info.created) == (1, False)
    # created by another sender between the GET and the PUT: 200, not created by this call
    taken, info = _run(_steps(), [_error(404, "model_not_found"), Reply(200, b'{"name":"m"}')])
    assert info.created is False


def test_failures_that_may_pass_are_retried_then_raise() -> None:
    answers = [Reply(failure="ConnectError"), _error(503, "database_unavailable")]
    taken, info = _run(_steps(), [*answers, Reply(200, json.dumps(MODEL).encode())])
    assert [type(step) for step in taken] == [Call, Pause, Call, Pause, Call]
    assert info.created is False
    with pytest.raises(ModelError) as raised:
        _run(_steps(attempts=3), [_error(503, "database_unavailable")] * 3)
    assert (raised.value.status, raised.value.code) == (503, "database_unavailable")


def test_refusals_raise_at_once_with_the_server_s_answer() -> None:
    with pytest.raises(ModelError) as raised:
        _run(_steps(), [_error(401, "unauthorized")])
    assert (raised.value.status, raised.value.code) == (401, "unauthorized")
    # a 404 that is not the model's (a proxy in front, a wrong prefix) creates nothing
    with pytest.raises(ModelError, match="reading model 'm': 404"):
        _run(_steps(), [Reply(404, b"not here")])
    with pytest.raises(ModelError) as raised:
        _run(_steps(), [_error(404, "model_not_found"), _error(409, "model_limit")])
    assert raised.value.code == "model_limit"
    assert not isinstance(raised.value, ModelConfigMismatchError)


def test_a_different_configuration_raises_with_each_field() -> None:
    stored = {**MODEL, "reference": {"kind": "trailing", "windows": 7, "start": None}}
    given = {"threshold": 0.6, "reference": {"kind": "trailing", "windows": 3}, "window": "1h"}
    with pytest.raises(ModelConfigMismatchError) as raised:
        _run(_steps(given), [Reply(200, json.dumps(stored).encode())])
    assert raised.value.differences == {"threshold": (0.6, 0.5), "reference.windows": (3, 7)}
    assert (raised.value.status, raised.value.code) == (200, "model_config_mismatch")
    # a monitor reports it once and does not ask again; it retries only what may pass
    assert not transient(raised.value)
    assert transient(ModelError("no answer"))
    assert transient(ModelError("busy", status=503))
    assert not transient(ModelError("no admin scope", status=403))


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("600s", "10m"),
        ("1d", "24h"),
        ([0.1, 0.01], [0.01, 0.1]),
        (1, 1.0),
        ("2026-01-01T00:00:00Z", "2026-01-01T01:00:00+01:00"),
        ({"kind": "trailing"}, {"kind": "trailing", "windows": 7}),
    ],
)
def test_values_are_compared_by_meaning(given: Any, stored: Any) -> None:
    assert config_differences({"field": given}, {"field": stored}) == {}


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("601s", "10m"),
        ([0.1], [0.01, 0.1]),
        (True, 1),
        ("2026-01-01T00:00:00", "2026-01-01T00:00:00Z"),
        ({"kind": "fixed"}, None),
        ("probability", "score"),
    ],
)
def test_different_values_differ(given: Any, stored: Any) -> None:
    assert config_differences({"field": given}, {"field": stored}) == {"field": (given, stored)}


def test_a_config_must_be_a_json_mapping() -> None:
    assert model_config(None) == ({}, b"{}")
    for bad in (["window"], {1: "x"}, {"threshold": float("inf")}, {"x": object()}):
        with pytest.raises(ValueError, match="config"):
            model_config(bad)
