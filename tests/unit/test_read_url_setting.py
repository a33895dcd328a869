"""``CALMON_DATABASE_READ_URL`` (a read replica) needs PostgreSQL on both URLs; anything else
is refused at start with a message naming the variables."""

from __future__ import annotations

import pytest

from calmon.settings import ConfigError, get_settings

PRIMARY = "postgresql+psycopg://calmon@db1/calmon"
REPLICA = "postgresql+psycopg://calmon@db2/calmon"


@pytest.mark.parametrize(
    ("primary", "replica"),
    [("sqlite:///calmon.db", REPLICA), (PRIMARY, "sqlite:///replica.db")],
    ids=["sqlite primary", "sqlite replica"],
)
def test_a_replica_needs_postgresql(
    monkeypatch: pytest.MonkeyPatch, primary: str, replica: str
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", primary)
    monkeypatch.setenv("CALMON_DATABASE_READ_URL", replica)
    with pytest.raises(ConfigError, match="CALMON_DATABASE_READ_URL") as caught:
        get_settings()
    assert "db2" not in str(caught.value)


def test_a_postgresql_replica_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", PRIMARY)
    monkeypatch.setenv("CALMON_DATABASE_READ_URL", REPLICA)
    assert get_settings().database_read_url == REPLICA
    monkeypatch.delenv("CALMON_DATABASE_READ_URL")
    assert get_settings().database_read_url == ""
