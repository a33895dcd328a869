"""The `calmon migrate`, `calmon api` and `calmon serve` commands (in process, real databases)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from calmon.cli import main
from calmon.settings import is_loopback


@pytest.fixture
def sqlite_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cli.db"
    monkeypatch.setenv("CALMON_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.delenv("CALMON_API_TOKENS", raising=False)
    monkeypatch.delenv("CALMON_API_TOKENS_FILE", raising=False)
    return path


def _tables(path: Path) -> set[str]:
    engine = create_engine(f"sqlite:///{path}")
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrate_check_and_downgrade(sqlite_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--check"]) == 1
    assert capsys.readouterr().out.startswith(f"current: empty (no file {sqlite_env}); head: ")
    # checking creates no database file
    assert not sqlite_env.exists()
    assert list(sqlite_env.parent.iterdir()) == []
    assert main(["migrate"]) == 0
    assert {"models", "predictions", "pending_labels"} <= _tables(sqlite_env)
    assert main(["migrate", "--check"]) == 0
    assert main(["migrate", "--downgrade", "base"]) == 0
    assert _tables(sqlite_env) <= {"alembic_version"}


def test_migrate_check_reads_an_existing_empty_sqlite_file(
    sqlite_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite_env.touch()
    assert main(["migrate", "--check"]) == 1
    assert capsys.readouterr().out.startswith("current: empty; head: ")


def test_help_is_plain_text_and_names_what_matters(capsys: pytest.CaptureFixture[str]) -> None:
    commands = [
        "migrate",
        "retention",
        "evaluate",
        "windows",
        "simulate",
        "serve",
        "api",
        "scheduler",
    ]
    for command in ([], *([name] for name in commands)):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = capsys.readouterr().out
        for markup in ("`", ":func:", ":mod:", ":class:", ":data:"):
            assert markup not in text, (command, markup)
        if command == ["migrate"]:
            assert "CALMON_DATABASE_URL" in text
            assert "sqlite:///calmon.db" in text
        if command == ["evaluate"]:
            assert "default probability" in " ".join(text.split())


def _retention_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """`calmon retention` on a migrated database that holds no period yet."""
    assert main(["retention"]) == 0
    assert capsys.readouterr().out == (
        "retention: none stored yet; the first process to start stores its "
        "CALMON_RETENTION_DAYS (here 400 days)\n"
    )
    assert main(["retention", "--days", "30"]) == 0
    assert capsys.readouterr().out == "retention: 30 days (was none stored)\n"
    assert main(["retention"]) == 0
    assert capsys.readouterr().out.startswith("retention: 30 days, stored 20")
    assert main(["retention", "--days", "0"]) == 0
    assert capsys.readouterr().out == "retention: 0 (keep everything) (was 30 days)\n"
    with pytest.raises(SystemExit):
        main(["retention", "--days", "-1"])
    assert "must be at least 0" in capsys.readouterr().err
    assert main(["retention"]) == 0
    assert capsys.readouterr().out.startswith("retention: 0 (keep everything), stored 20")


def test_retention_shows_and_changes_the_stored_period(
    sqlite_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CALMON_RETENTION_DAYS", raising=False)
    assert main(["retention"]) == 1
    assert "run `calmon migrate`" in capsys.readouterr().err
    assert main(["migrate"]) == 0
    _retention_commands(capsys)


def test_retention_postgres(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", postgres_database)
    monkeypatch.delenv("CALMON_RETENTION_DAYS", raising=False)
    assert main(["migrate"]) == 0
    _retention_commands(capsys)


def test_migrate_postgres(postgres_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", postgres_database)
    assert main(["migrate"]) == 0
    assert main(["migrate", "--check"]) == 0


def test_migrate_unreachable_database_fails_cleanly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALMON_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:9/none")
    assert main(["migrate"]) == 1
    assert "database error" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["api", "serve"])
@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.org"])
def test_open_api_refuses_non_loopback(
    sqlite_env: Path, command: str, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--host", host]) == 2
    err = capsys.readouterr().err
    assert f"refusing to listen on {host}" in err
    assert "CALMON_API_TOKENS" in err
    assert not sqlite_env.exists()


def test_invalid_configuration_exits_2(
    sqlite_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALMON_PORT", "99999")
    for command in ("api", "serve", "migrate"):
        assert main([command]) == 2
        assert "CALMON_PORT" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("localhost.example.org", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
