"""Scratch PostgreSQL databases for the benchmarks: one per run, dropped at its end."""

from __future__ import annotations

import os
import uuid
from typing import Final

import psycopg
from psycopg import sql

#: the server the benchmarks create their scratch databases on (a database to connect to
#: while creating and dropping them)
ADMIN_URL: Final = os.environ.get(
    "CALMON_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def create_scratch(admin_url: str = ADMIN_URL) -> tuple[str, str]:
    """Create an empty database ``calmon_bench_<random>``; returns (its name, its libpq URL)."""
    name = f"calmon_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name, f"{admin_url.rpartition('/')[0]}/{name}"


def drop_scratch(name: str, admin_url: str = ADMIN_URL) -> None:
    """Drop the scratch database ``name``, closing its remaining connections."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
