"""`calmon api` killed (SIGKILL, workers included) in the middle of a load, restarted, and every
batch that was not acknowledged sent again: nothing acknowledged is lost, nothing is stored
twice."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import pytest

from tests.e2e.faults.helpers import (
    JSON,
    MODEL,
    ApiFactory,
    batch_body,
    in_threads,
    send_until_acknowledged,
    stored,
)

pytestmark = pytest.mark.slow

BATCHES = 160
PER_BATCH = 250
CLIENTS = 4
#: acknowledged batches before the kill
KILL_AFTER = 30


def test_kill_restart_and_replay(database_url: str, api_factory: ApiFactory) -> None:
    api = api_factory(database_url)
    api.start()
    api.create_model()
    url = f"{api.base}/v1/models/{MODEL}/predictions"
    bodies: dict[int, bytes] = {}
    sent: dict[str, float] = {}
    for batch in range(BATCHES):
        bodies[batch], scores = batch_body(batch, PER_BATCH)
        sent |= scores
    acknowledged: dict[int, dict[str, int]] = {}
    unacknowledged: set[int] = set()
    lock = threading.Lock()
    enough = threading.Event()

    def client(index: int) -> None:
        with httpx.Client(timeout=30) as session:
            for batch in range(index, BATCHES, CLIENTS):
                try:
                    response = session.post(url, content=bodies[batch], headers=JSON)
                except httpx.TransportError:
                    response = None
                with lock:
                    if response is not None and response.status_code == 200:
                        acknowledged[batch] = response.json()
                        if len(acknowledged) >= KILL_AFTER:
                            enough.set()
                    else:
                        unacknowledged.add(batch)

    failures: list[BaseException] = []

    def load() -> None:
        try:
            in_threads(CLIENTS, client)
        except BaseException as exc:
            failures.append(exc)

    loader = threading.Thread(target=load)
    loader.start()
    assert enough.wait(timeout=120), "the load did not start"
    api.kill()
    loader.join()
    assert not failures, failures

    assert len(acknowledged) + len(unacknowledged) == BATCHES
    assert KILL_AFTER <= len(acknowledged) < BATCHES
    after_kill, scores = stored(database_url)
    per_batch = Counter(int(client_id[1:5]) for client_id in scores)
    assert set(per_batch.values()) == {PER_BATCH}, "a batch is partly stored"
    assert set(acknowledged) <= set(per_batch), "an acknowledged batch was lost"
    assert after_kill == len(per_batch) * PER_BATCH

    api.start()
    started = time.monotonic()
    replayed: dict[int, dict[str, int]] = {}

    def replay(index: int) -> None:
        for batch in sorted(unacknowledged)[index::CLIENTS]:
            replayed[batch], _ = send_until_acknowledged(url, bodies[batch])

    in_threads(CLIENTS, replay)
    assert time.monotonic() - started < 120
    # a batch committed by a request the kill cut short is a repeat when replayed
    committed_unanswered = set(per_batch) - set(acknowledged)
    for batch, answer in replayed.items():
        stored_before = PER_BATCH if batch in committed_unanswered else 0
        assert answer["new"] == PER_BATCH - stored_before, (batch, answer)
        assert answer["duplicates"] == stored_before, (batch, answer)
    count, scores = stored(database_url)
    assert count == len(sent) == BATCHES * PER_BATCH
    assert scores == sent
