"""The stored records of a seeded dataset, byte for byte: a few windows of a model with two
segments, a trailing reference, unlabelled predictions, an objective and a pooled decision,
computed at fixed instants on each backend and compared, as the JSON text stored, with
``tests/data/windows/golden_records.json``.

The golden file was written by the code before the window's evaluation moved into the metric
engine (``calmon.metrics.window_evaluation``); a change to a stored record shows here. To write it
again after a deliberate change of the record: ``CALMON_WRITE_GOLDEN=1`` (then review the diff).

Byte for byte except in a float's last bits: NumPy picks its SIMD kernels by the processor
(AVX-512, AVX2, or neither), and they sum in other orders, so a Brier score or a test statistic
can come out a few units in the last place apart (up to 16 seen on a processor without AVX2).
Every other byte of the text (keys, order, nulls, integers) must match, and each float must
agree to :data:`FLOAT_RELATIVE` of the larger of the two: far below any change of a method.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Text, cast, select

from calmon.db.models import Model, WindowResult
from calmon.services.windows.compute import compute_window
from calmon.services.windows.reference_cache import ReferenceCache
from tests.integration.scheduler.helpers import (
    FIVE_MINUTES,
    Env,
    SetClock,
    create_model,
    make_batch,
    send,
)

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "windows" / "golden_records.json"
FIRST = datetime(2021, 3, 1, tzinfo=UTC)
WINDOWS = 3
COMPUTED_AT = FIRST + WINDOWS * FIVE_MINUTES + timedelta(minutes=1)
#: how far, relative to the larger, a stored float may be from the golden one
FLOAT_RELATIVE = 1e-13
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _stored_records(env: Env) -> dict[str, str]:
    """Compute every window at fixed instants, oldest first; the stored record texts keyed
    ``start segment``."""
    create_model(
        env.client,
        "golden",
        window="5m",
        grace="0s",
        threshold=0.5,
        pi0=[0.1, 0.3],
        reference={"kind": "trailing", "windows": 2},
        decision={"min_positives": 60},
        objective={"costs": {"false_positive": 1.0, "false_negative": 4.0}},
    )
    batch = make_batch(
        prefix="golden",
        start=FIRST,
        count=WINDOWS * 600,
        spacing=FIVE_MINUTES / 600,
        seed=11,
        segments=["a", "b", None],
        unlabelled=0.05,
    )
    send(env.client, "golden", batch)
    # one more window, half unlabelled: its labels do not measure its ratio, so its records
    # hold the label-free estimate (the windows before are 95% labelled and hold none)
    half = make_batch(
        prefix="golden-half",
        start=FIRST + WINDOWS * FIVE_MINUTES,
        count=600,
        spacing=FIVE_MINUTES / 600,
        seed=12,
        segments=["a", "b", None],
        unlabelled=0.5,
    )
    send(env.client, "golden", half)
    period = {
        "start": FIRST.isoformat(),
        "end": (FIRST + (WINDOWS + 1) * FIVE_MINUTES).isoformat(),
    }
    assert env.client.post("/v1/models/golden/recompute", params=period).status_code == 202
    cache = ReferenceCache()
    clock = SetClock(at=COMPUTED_AT)
    with env.session_factory() as session:
        model = session.scalars(select(Model).where(Model.name == "golden")).one()
    for index in range(WINDOWS + 1):
        # each window in a session of its own, whose transaction the claim begins
        with env.session_factory() as session:
            computed = compute_window(
                session,
                model=model,
                start=FIRST + index * FIVE_MINUTES,
                now=COMPUTED_AT,
                instance="golden",
                cache=cache,
                margin=timedelta(seconds=5),
                clock=clock,
            )
            session.commit()
        assert computed is not None
    with env.session_factory() as session:
        rows = session.execute(
            select(WindowResult.starts_at, WindowResult.segment, cast(WindowResult.record, Text))
            .where(WindowResult.model_id == env.model_id("golden"))
            .order_by(WindowResult.starts_at, WindowResult.segment)
        ).all()
    return {f"{start.astimezone(UTC).isoformat()} {segment}": text for start, segment, text in rows}


def test_stored_records_match_the_golden_file_byte_for_byte(env: Env) -> None:
    stored = _stored_records(env)
    assert len(stored) == (WINDOWS + 1) * 3
    if os.environ.get("CALMON_WRITE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
    golden: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(stored) == sorted(golden)
    for key, text in golden.items():
        assert same_record_text(stored[key], text), key


def same_record_text(stored: str, golden: str) -> bool:
    """Whether two record texts are the same byte for byte, but for floats within
    :data:`FLOAT_RELATIVE` of each other (integers and everything else exact)."""
    if stored == golden:
        return True
    if _NUMBER.split(stored) != _NUMBER.split(golden):
        return False
    pairs = zip(_NUMBER.findall(stored), _NUMBER.findall(golden), strict=True)
    for mine, theirs in pairs:
        if mine == theirs:
            continue
        if not any(mark in mine + theirs for mark in ".eE"):
            return False
        a, b = float(mine), float(theirs)
        if abs(a - b) > FLOAT_RELATIVE * max(abs(a), abs(b)):
            return False
    return True


def test_same_record_text_allows_only_last_place_float_differences() -> None:
    assert same_record_text('{"a": 0.1, "n": 3}', '{"a": 0.1, "n": 3}')
    assert same_record_text('{"a": 0.7898345213874585}', '{"a": 0.7898345213874586}')
    assert same_record_text('{"z": -1.0313917973526676}', '{"z": -1.031391797352665}')
    assert not same_record_text('{"a": 0.78983452138}', '{"a": 0.78983452139}')
    assert not same_record_text('{"n": 3}', '{"n": 4}')
    assert not same_record_text('{"a": 0.1, "b": 0.2}', '{"b": 0.1, "a": 0.2}')
    assert not same_record_text('{"a": null}', '{"a": 0.0}')
    assert not same_record_text('{"a": 1.0, "b": 2}', '{"a": 1.0}')
