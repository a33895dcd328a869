"""A served model of simulated windows for the web view: the ``calmon simulate`` stream the
web view tests and ``bench/ui.py`` load, and copies of its records to make a long model
quickly."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Final

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from calmon.db.models import Model, WindowResult
from calmon.timeline import iso
from harness.processes import calmon_command

#: the simulated model's name
MODEL: Final = "drift"


def simulate(base: str, *, model: str, truth: Path, env: dict[str, str]) -> None:
    """Run `calmon simulate` to the end: 3 windows per phase, every window computed."""
    done = subprocess.run(
        [
            *calmon_command(),
            "simulate",
            "--url",
            base,
            "--model",
            model,
            "--seed",
            "11",
            "--windows-per-phase",
            "3",
            "--truth",
            str(truth),
            "--wait",
            "300",
        ],
        env=env,
        cwd=truth.parent,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "every window computed" in done.stderr


def store_copies(database_url: str, *, source: str, target: str, count: int) -> None:
    """Store ``count`` windows for the existing model ``target``: the records of ``source``'s
    segment ``*`` again, one after the other, ending where ``source``'s first window starts
    (each record's ``start``/``end`` moved with it). The window service reads them as it reads
    computed ones; this is only quicker than computing 500 windows."""
    engine = create_engine(database_url)
    with Session(engine) as session:
        models = {m.name: m for m in session.scalars(select(Model))}
        rows = session.scalars(
            select(WindowResult)
            .where(WindowResult.model_id == models[source].id, WindowResult.segment == "*")
            .order_by(WindowResult.starts_at)
        ).all()
        length = rows[0].ends_at - rows[0].starts_at
        first = rows[0].starts_at
        for index in range(count):
            row = rows[index % len(rows)]
            start = first - (count - index) * length
            record = copy.deepcopy(row.record)
            record["start"], record["end"] = iso(start), iso(start + length)
            session.add(
                WindowResult(
                    model_id=models[target].id,
                    segment="*",
                    starts_at=start,
                    ends_at=start + length,
                    computed_at=row.computed_at,
                    computed_by="copy",
                    version=1,
                    n=row.n,
                    n_pos=row.n_pos,
                    unlabelled=row.unlabelled,
                    prior=row.prior,
                    record=record,
                )
            )
        session.commit()
    engine.dispose()
