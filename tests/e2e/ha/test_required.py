"""The high-availability tests never pass silently for want of a tool: without PostgreSQL's
server binaries or PgBouncer they fail under ``CALMON_REQUIRE_HA=1`` (CI) and otherwise skip
with a warning that they did not run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.ha import cluster


@pytest.mark.parametrize(
    ("find", "missing"),
    [
        (lambda: cluster.pg_binary("pg_rewind"), "pg_rewind is not installed"),
        (cluster.pgbouncer_binary, "pgbouncer is not installed"),
    ],
    ids=["postgresql", "pgbouncer"],
)
def test_a_missing_tool_fails_when_required_and_skips_loudly_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, find: Callable[[], str], missing: str
) -> None:
    monkeypatch.setattr(cluster, "PG_BIN", tmp_path)
    monkeypatch.setattr(cluster, "SBIN", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(cluster.REQUIRE, "1")
    # BaseException: a skip must not pass for the failure
    with pytest.raises(BaseException, match=f"{cluster.REQUIRE}=1") as required:
        find()
    assert required.type is pytest.fail.Exception
    monkeypatch.delenv(cluster.REQUIRE)
    with (
        pytest.warns(UserWarning, match="NOT RUN"),
        pytest.raises(BaseException, match=missing) as optional,
    ):
        find()
    assert optional.type is pytest.skip.Exception
