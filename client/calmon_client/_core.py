"""What the blocking :class:`~calmon_client.Monitor` and the asyncio
:class:`~calmon_client.AsyncMonitor` share, free of I/O: the checks of what callers log, the
queue with its batching rule, the back-off, and the delivery of one batch as a generator of
steps (send this body, pause this long) that each of them drives with its own HTTP client and
clock.

Delivery is safe to repeat: the server stores a prediction id once and answers an exact repeat
as a duplicate, and applying a label twice changes nothing. So a batch whose answer was lost is
simply sent again until the server acknowledges it.
"""

from __future__ import annotations

import email.utils
import json
import json.encoder
import logging
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Final, Literal, cast

from calmon_client._arrow import ARROW_MEDIA_TYPE, encode_arrow, prepare_arrow, refuse_arrow

logger = logging.getLogger("calmon_client")

#: the largest batch the server takes (the server's ``MAX_BATCH``; a test pins the copy)
MAX_BATCH: Final = 10_000
#: a model name the server takes (the server's ``MODEL_NAME_PATTERN``; a test pins the copy)
MODEL_PATTERN: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
#: requests :func:`ensure_steps` makes of each kind before it gives up on a failure that may pass
ENSURE_ATTEMPTS: Final = 5
_DURATION: Final = re.compile(r"^([0-9]+)(s|m|h|d)$")
_DURATION_UNITS: Final = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
#: answers after which the same request may succeed: sent again without limit
RETRY_STATUSES: Final = frozenset({408, 429, 502, 503, 504})
#: an unexpected server error is tried this many times in all, then the batch is rejected
SERVER_ERROR_ATTEMPTS: Final = 5
#: the longest ``Retry-After`` obeyed, in seconds
MAX_RETRY_AFTER: Final = 300.0
_escape: Callable[[str], str] = json.encoder.encode_basestring_ascii
#: a field of a 422 answer's details: ``predictions[12].score``
_ITEM_FIELD: Final = re.compile(r"^(?:predictions|labels)\[(\d+)\]")

Kind = Literal["predictions", "labels"]
WhenFull = Literal["block", "drop"]
IncidentKind = Literal["invalid", "dropped", "retrying", "rejected", "lost", "model"]
#: a prediction as queued: (id, timestamp, score, label, segment, monotonic time queued)
PredictionItem = tuple[str, str, float, int | None, str | None, float]
#: a label as queued: (id, label, monotonic time queued)
LabelItem = tuple[str, int, float]
Item = PredictionItem | LabelItem


@dataclass(frozen=True, slots=True)
class Incident:
    """Something that went wrong, as the ``on_error`` callback sees it.

    ``kind`` says what became of the ``count`` predictions or labels concerned:

    - ``invalid``: ``log`` or ``label`` was given something the server cannot take (a naive
      datetime, a score that is not a finite number, ...); not queued.
    - ``dropped``: the queue was full (``when_full="drop"``, or ``"block"`` past its timeout)
      or the monitor closed; not queued.
    - ``retrying``: a request failed in a way that may pass (connection error, timeout, 408,
      429, 502, 503, 504, or a 500 up to 5 times); the batch is sent again after a pause.
    - ``rejected``: the server refused them for good (400, 401, 403, 404, 409, 413, 422, ...);
      ``code`` and ``message`` are the server's. Only the offending items of a batch are
      rejected when the answer names them; the rest is sent again.
    - ``lost``: still unacknowledged when ``close`` gave up waiting (some may be stored).
    - ``model``: a monitor given a ``config`` could not make sure its model exists, or found
      it with another configuration (``message`` says which; ``count`` is 0). Sending goes
      on: a missing model makes the server refuse each batch (404 ``model_not_found``).
    """

    kind: IncidentKind
    message: str
    count: int
    status: int | None = None
    code: str | None = None
    #: the first few ids concerned, when known
    ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Stats:
    """Counters since the monitor started (each prediction or label counts once)."""

    #: waiting in the queue or in a request not answered yet
    queued: int = 0
    #: predictions the server acknowledged (``new`` + ``duplicates``)
    predictions_sent: int = 0
    #: of those, stored by this monitor's request
    new: int = 0
    #: of those, already stored with the same content (an earlier attempt was stored but its
    #: answer was lost, or another sender sent them)
    duplicates: int = 0
    #: labels the server acknowledged
    labels_sent: int = 0
    invalid: int = 0
    dropped: int = 0
    rejected: int = 0
    lost: int = 0
    #: requests that failed and were sent again
    retries: int = 0
    #: HTTP requests made
    requests: int = 0


class InvalidItemError(ValueError):
    """What :func:`prediction_item` and :func:`label_item` raise (turned into an incident)."""


def described(value: object) -> str:
    """``repr(value)`` for a message, at most 100 characters; never raises."""
    try:
        text = repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= 100 else text[:97] + "..."


def wait_seconds(value: object, default: float | None) -> tuple[float | None, str | None]:
    """A ``timeout`` given to ``flush`` or ``close`` as seconds (None: ``default``; infinite: no
    limit; negative: 0), and what is wrong with it: an unusable one (text, NaN, an object whose
    conversion raises) is ``default`` with a message, never an exception."""
    if value is None:
        return default, None
    try:
        if isinstance(value, bool | str | bytes):
            raise TypeError(type(value).__name__)
        seconds = float(value)  # type: ignore[arg-type]  # anything float() takes
    except Exception:
        return default, f"timeout {described(value)} is not a number of seconds"
    if math.isnan(seconds):
        return default, "timeout NaN is not a number of seconds"
    return (None if math.isinf(seconds) and seconds > 0 else max(seconds, 0.0)), None


def item_incident(kind: IncidentKind, message: str, client_id: object) -> Incident:
    """An incident of one item, named by its id (described when it is not a string)."""
    shown = client_id if type(client_id) is str else described(client_id)
    return Incident(kind, message, 1, ids=(shown,))


def prediction_item(
    client_id: object,
    score: object,
    timestamp: datetime | str | None,
    label: object,
    segment: object,
    now: float,
) -> PredictionItem:
    """Check what a caller logs and put it in the queue's form; raises :class:`InvalidItemError`
    and nothing else, whatever it is given (:func:`_prediction_item` says what is checked)."""
    try:
        return _prediction_item(client_id, score, timestamp, label, segment, now)
    except InvalidItemError:
        raise
    except Exception as exc:
        raise InvalidItemError(f"a value is not usable ({exc!r:.80})") from None


def _prediction_item(
    client_id: object,
    score: object,
    timestamp: datetime | str | None,
    label: object,
    segment: object,
    now: float,
) -> PredictionItem:
    """The queue's form of a logged prediction; raises :class:`InvalidItemError`.

    Only what the sender could not send, or would send in another form than meant, is
    checked here (types, finiteness, aware datetimes); the server checks the rest (id and
    segment patterns, the event time's range, a probability's range) and the answer names the
    items it refuses."""
    # the common types first: this runs in the caller's thread for every prediction
    if type(client_id) is not str or not client_id:
        raise InvalidItemError("id must be a non-empty string")
    if type(score) is not float:
        score = _score_value(score)
    if not math.isfinite(score):
        raise InvalidItemError("score must be finite")
    if type(timestamp) is str:
        stamp = timestamp
    elif timestamp is None:
        stamp = datetime.now(UTC).isoformat()
    elif isinstance(timestamp, datetime):
        if timestamp.tzinfo is None or timestamp.utcoffset() is None:
            raise InvalidItemError("timestamp must be an aware datetime (with a tzinfo)")
        stamp = timestamp.isoformat()
    elif isinstance(timestamp, str):
        stamp = str.__str__(timestamp)
    else:
        raise InvalidItemError("timestamp must be a datetime, an ISO 8601 string or None")
    if segment is not None and type(segment) is not str:
        if not isinstance(segment, str):
            raise InvalidItemError("segment must be a string or None")
        segment = str.__str__(segment)
    if label is not None and not (type(label) is int and (label == 0 or label == 1)):
        label = _label_value(label, optional=True)
    return (client_id, stamp, score, label, segment, now)


def _score_value(score: object) -> float:
    """A score that is not a float already, as one; raises :class:`InvalidItemError`."""
    if isinstance(score, bool | str | bytes):
        raise InvalidItemError("score must be a number")
    try:
        return float(score)  # type: ignore[arg-type]  # anything float() takes
    except (TypeError, ValueError):
        raise InvalidItemError("score must be a number") from None
    except OverflowError:  # an int or Fraction beyond the float range (10**400)
        raise InvalidItemError("score must be within the float range") from None


def label_item(client_id: object, label: object, now: float) -> LabelItem:
    """Check a label sent on its own; raises :class:`InvalidItemError` and nothing else."""
    if type(client_id) is not str or not client_id:
        raise InvalidItemError("id must be a non-empty string")
    try:
        value = _label_value(label, optional=False)
    except InvalidItemError:
        raise
    except Exception as exc:
        raise InvalidItemError(f"label is not usable ({exc!r:.80})") from None
    assert value is not None
    return (client_id, value, now)


def _label_value(label: object, *, optional: bool) -> int | None:
    if label is None and optional:
        return None
    if isinstance(label, bool):
        return int(label)
    if isinstance(label, int) and label in (0, 1):
        return label
    if isinstance(label, float) and label in (0.0, 1.0):
        return int(label)
    raise InvalidItemError("label must be 0, 1" + (" or None" if optional else ""))


JSON_MEDIA_TYPE: Final = "application/json"
#: the headers of the requests that read or create the model (JSON bodies)
ENSURE_HEADERS: Final = {"Content-Type": JSON_MEDIA_TYPE}
#: a label as it ends a prediction's JSON object
_LABEL_JSON: Final = {None: "", 0: ',"label":0', 1: ',"label":1'}


def encode(kind: Kind, items: list[Item]) -> bytes:
    """The JSON body of a request carrying ``items``.

    Written item by item (strings escaped by the ``json`` module's own escaper, floats by
    their ``repr``, which is what ``json.dumps`` writes): about half the cost of building a
    dict per item for ``json.dumps``, and this runs for every prediction."""
    if kind == "labels":
        labels = [{"id": item[0], "label": item[1]} for item in items]
        return json.dumps({"labels": labels}, separators=(",", ":")).encode()
    escape = _escape
    labels_json = _LABEL_JSON
    parts = [
        f'{{"id":{escape(client_id)},"timestamp":{escape(stamp)},"score":{score!r}'
        f"{labels_json[label]}" + ("}" if segment is None else f',"segment":{escape(segment)}}}')
        for client_id, stamp, score, label, segment, _ in cast(list[PredictionItem], items)
    ]
    return ('{"predictions":[' + ",".join(parts) + "]}").encode()


def encode_body(kind: Kind, items: list[Item]) -> tuple[bytes, str]:
    """The body of a request carrying ``items`` and its media type: an Arrow IPC stream where
    pyarrow is importable (:mod:`calmon_client._arrow`), else JSON."""
    arrow = encode_arrow(kind, items)
    if arrow is not None:
        return arrow, ARROW_MEDIA_TYPE
    return encode(kind, items), JSON_MEDIA_TYPE


@dataclass(slots=True)
class Batch:
    """Items of one kind taken from the queue together, and what became of them."""

    kind: Kind
    items: list[Item]
    acknowledged: int = 0
    rejected: int = 0

    @property
    def unresolved(self) -> int:
        return len(self.items) - self.acknowledged - self.rejected


def _distinct_ids(waiting: deque[Item], size: int) -> list[Item]:
    """Up to ``size`` items from the front of ``waiting`` with no id twice: a later copy of an
    id stays at the front for the next batch, in its order. The server refuses every copy of an
    id that one request sends twice with other content, while across requests it keeps the
    first; so the first logged is kept wherever a batch ends."""
    items: list[Item] = []
    seen: set[object] = set()
    later: list[Item] = []
    while waiting and len(items) < size:
        item = waiting.popleft()
        if item[0] in seen:
            later.append(item)
        else:
            seen.add(item[0])
            items.append(item)
    waiting.extendleft(reversed(later))
    return items


class Queue:
    """The bounded queue of predictions and labels waiting to be sent, and the counters.

    Not thread-safe: the blocking monitor holds its lock around every call; the asyncio one
    calls it from its event loop only. A batch is due when ``batch_size`` items of one kind
    wait, when the oldest has waited ``flush_interval`` seconds, or at once while someone
    flushes or closes."""

    def __init__(self, *, batch_size: int, flush_interval: float, max_queue: int) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        if not flush_interval > 0:
            raise ValueError("flush_interval must be positive")
        if max_queue < batch_size:
            raise ValueError("max_queue must be at least batch_size")
        prepare_arrow()
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_queue = max_queue
        self.waiting: dict[Kind, deque[Item]] = {"predictions": deque(), "labels": deque()}
        #: items queued and items resolved (acknowledged, rejected or lost), per kind: a flush
        #: waits until the second reaches what the first was when it began
        self.queued: dict[Kind, int] = {"predictions": 0, "labels": 0}
        self.resolved: dict[Kind, int] = {"predictions": 0, "labels": 0}
        self.waiting_count = 0
        self.in_flight = 0
        self.in_flight_kind: Kind = "predictions"
        self.counts: dict[str, int] = {f.name: 0 for f in fields(Stats) if f.name != "queued"}

    def size(self) -> int:
        """Items waiting (not those in flight)."""
        return self.waiting_count

    def full(self) -> bool:
        return self.waiting_count >= self.max_queue

    def put(self, kind: Kind, item: Item) -> bool:
        """Queue ``item``; True when the sender should look again (its first item, or a full
        batch)."""
        waiting = self.waiting[kind]
        waiting.append(item)
        self.queued[kind] += 1
        self.waiting_count += 1
        return len(waiting) == 1 or len(waiting) == self.batch_size

    def due_in(self, now: float, *, eager: bool) -> float | None:
        """Seconds until a batch is due (0: now), or None while nothing waits. ``eager``: any
        waiting item is due (a flush or close is under way)."""
        soonest: float | None = None
        for waiting in self.waiting.values():
            if not waiting:
                continue
            if eager or len(waiting) >= self.batch_size:
                return 0.0
            left = waiting[0][-1] + self.flush_interval - now
            if left <= 0:
                return 0.0
            soonest = left if soonest is None else min(soonest, left)
        return soonest

    def take(self, now: float, *, eager: bool) -> Batch | None:
        """The next due batch (predictions before labels), or None."""
        kind: Kind
        for kind in ("predictions", "labels"):
            waiting = self.waiting[kind]
            if waiting and (
                eager
                or len(waiting) >= self.batch_size
                or waiting[0][-1] + self.flush_interval <= now
            ):
                items = (
                    _distinct_ids(waiting, self.batch_size)
                    if kind == "predictions"
                    else [waiting.popleft() for _ in range(min(len(waiting), self.batch_size))]
                )
                count = len(items)
                self.waiting_count -= count
                self.in_flight, self.in_flight_kind = count, kind
                return Batch(kind, items)
        return None

    def settle(self, batch: Batch, *, lost: bool = False) -> None:
        """Count a batch whose delivery ended as resolved (its unresolved items as lost)."""
        if lost:
            self.counts["lost"] += batch.unresolved
        self.resolved[batch.kind] += len(batch.items)
        self.in_flight = 0

    def abandon(self) -> int:
        """Count everything waiting and in flight as lost (``close`` gave up); how many."""
        lost = self.size() + self.in_flight
        self.resolved[self.in_flight_kind] += self.in_flight
        for kind, waiting in self.waiting.items():
            self.resolved[kind] += len(waiting)
            waiting.clear()
        self.waiting_count = 0
        self.counts["lost"] += lost
        self.in_flight = 0
        return lost

    def flushed(self, target: dict[Kind, int]) -> bool:
        """Whether every item queued before ``target`` (a copy of :attr:`queued`) is resolved."""
        return all(self.resolved[kind] >= count for kind, count in target.items())

    def stats(self, sent: dict[str, int]) -> Stats:
        """The counters: this queue's and ``sent``, the sender's (see :func:`deliver`)."""
        counts = {name: self.counts.get(name, 0) + sent.get(name, 0) for name in self.counts}
        return Stats(**{**counts, "queued": self.size() + self.in_flight})


@dataclass(frozen=True, slots=True)
class Backoff:
    """Pauses between attempts: ``first · 2^k`` capped at ``cap``, each drawn uniformly in
    [50 %, 100 %] of that so that many senders do not retry in step; a ``Retry-After`` from
    the server is obeyed instead (plus 0 to 25 %, capped at 300 s)."""

    first: float = 0.1
    cap: float = 5.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 0)."""
        wait = parse_retry_after(retry_after)
        if wait is not None:
            return min(wait, MAX_RETRY_AFTER) * self.rng.uniform(1.0, 1.25)
        return min(self.cap, self.first * 2.0 ** min(attempt, 30)) * self.rng.uniform(0.5, 1.0)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds asked by a ``Retry-After`` header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = moment.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


@dataclass(frozen=True, slots=True)
class Post:
    """Step: POST ``body`` to the batch's route; the driver sends back a :class:`Reply`."""

    kind: Kind
    body: bytes
    content_type: str = JSON_MEDIA_TYPE


@dataclass(frozen=True, slots=True)
class Pause:
    """Step: wait ``seconds`` before the next attempt; the driver sends back None."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reply:
    """The server's answer, or ``failure`` (no answer: what the transport raised)."""

    status: int = 0
    content: bytes = b""
    retry_after: str | None = None
    failure: str | None = None


Step = Post | Pause


def deliver(
    batch: Batch,
    counts: dict[str, int],
    backoff: Backoff,
    report: Callable[[Incident], None],
) -> Generator[Step, Reply | None, None]:
    """Deliver ``batch``: yields the requests and pauses to make, ends once every item is
    acknowledged or rejected. ``counts`` (the sender's counters, by :class:`Stats` field) are
    updated as answers come; ``report`` receives the incidents.

    Retried until acknowledged: connection errors and timeouts, 408, 429, 502, 503 and 504
    (and a 500 up to :data:`SERVER_ERROR_ATTEMPTS` times), pausing as :class:`Backoff` says.
    A 413 splits the batch in halves. A 409 or 422 whose details name the offending items
    rejects just those and sends the rest again; any other error answer rejects the batch."""
    work: list[list[Item]] = [batch.items]
    while work:
        work.extend((yield from _deliver_part(batch, work.pop(), counts, backoff, report)))


def _deliver_part(
    batch: Batch,
    items: list[Item],
    counts: dict[str, int],
    backoff: Backoff,
    report: Callable[[Incident], None],
) -> Generator[Step, Reply | None, list[list[Item]]]:
    """Deliver ``items``, a part of ``batch``, as :func:`deliver` says: retry them until
    acknowledged, and send again what is left after the server refuses some. Returns the
    halves to deliver instead when the server answers 413 (too large), else nothing left."""
    attempt = 0
    body, content_type = encode_body(batch.kind, items)
    while True:
        reply = yield Post(batch.kind, body, content_type)
        assert reply is not None
        counts["requests"] += 1
        if reply.status == 415 and content_type == ARROW_MEDIA_TYPE:
            refuse_arrow()
            body, content_type = encode_body(batch.kind, items)
            continue
        if _retryable(reply, attempt):
            _note_retry(batch.kind, items, reply, attempt, counts, report)
            yield Pause(backoff.delay(attempt, reply.retry_after))
            attempt += 1
            continue
        if reply.status == 200:
            _acknowledge(batch, items, reply.content, counts)
            if attempt:
                logger.info(
                    "calmon: %d %s delivered after %d attempts",
                    len(items),
                    _noun(batch.kind, len(items)),
                    attempt + 1,
                )
            return []
        if reply.status == 413 and len(items) > 1:
            half = len(items) // 2
            return [items[half:], items[:half]]
        items = _refuse(batch, items, reply, counts, report)
        if not items:
            return []
        attempt = 0
        body, content_type = encode_body(batch.kind, items)


def _retryable(reply: Reply, attempt: int) -> bool:
    """Whether attempt number ``attempt`` (from 0) is to be made again: no answer, a status of
    :data:`RETRY_STATUSES`, or another server error before :data:`SERVER_ERROR_ATTEMPTS`
    attempts."""
    status = reply.status
    return (
        reply.failure is not None
        or status in RETRY_STATUSES
        or (status >= 500 and attempt + 1 < SERVER_ERROR_ATTEMPTS)
    )


def _note_retry(
    kind: Kind,
    items: list[Item],
    reply: Reply,
    attempt: int,
    counts: dict[str, int],
    report: Callable[[Incident], None],
) -> None:
    """Count a retry of ``items`` and report it as an incident; the first retry of a part is
    also logged as a warning (later ones would only repeat it)."""
    status = reply.status
    problem = reply.failure or f"{status} {_error(reply)[1]}"
    counts["retries"] += 1
    if attempt == 0:
        logger.warning(
            "calmon: sending %d %s failed (%s); retrying",
            len(items),
            _noun(kind, len(items)),
            problem,
        )
    report(
        Incident(
            "retrying",
            problem,
            len(items),
            status=status or None,
            code=_error(reply)[0] if status else None,
        )
    )


def _refuse(
    batch: Batch,
    items: list[Item],
    reply: Reply,
    counts: dict[str, int],
    report: Callable[[Incident], None],
) -> list[Item]:
    """Reject what an error answer refuses: the items a 409 or 422 names (when it names some
    but not all), else all of ``items``. Returns the items left to send again."""
    status = reply.status
    code, message = _error(reply)
    offending = _offending(batch.kind, status, code, reply.content, items)
    refused = offending if offending and len(offending) < len(items) else set(range(len(items)))
    _reject(batch, [items[i] for i in sorted(refused)], status, code, message, counts, report)
    return [item for i, item in enumerate(items) if i not in refused]


def _acknowledge(batch: Batch, items: list[Item], content: bytes, counts: dict[str, int]) -> None:
    batch.acknowledged += len(items)
    if batch.kind == "labels":
        counts["labels_sent"] += len(items)
        return
    counts["predictions_sent"] += len(items)
    try:
        answer = json.loads(content)
        new, duplicates = int(answer["new"]), int(answer["duplicates"])
    except (ValueError, KeyError, TypeError):
        new, duplicates = len(items), 0
    counts["new"] += new
    counts["duplicates"] += duplicates


def _reject(
    batch: Batch,
    items: list[Item],
    status: int,
    code: str,
    message: str,
    counts: dict[str, int],
    report: Callable[[Incident], None],
) -> None:
    batch.rejected += len(items)
    counts["rejected"] += len(items)
    ids = tuple(str(item[0]) for item in items[:10])
    logger.error(
        "calmon: the server refused %d %s (%d %s: %s), e.g. ids %s",
        len(items),
        _noun(batch.kind, len(items)),
        status,
        code,
        message,
        ", ".join(ids[:3]),
    )
    report(Incident("rejected", message, len(items), status=status, code=code, ids=ids))


def _noun(kind: Kind, count: int) -> str:
    """``kind`` ("predictions", "labels") for ``count`` items: "1 prediction", "2 labels"."""
    return kind if count != 1 else kind[:-1]


def _error(reply: Reply) -> tuple[str, str]:
    """The error code and message of an error answer (calmon's error body, or the text)."""
    try:
        error = json.loads(reply.content)["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        text = reply.content[:200].decode(errors="replace")
        return f"http_{reply.status}", text or f"HTTP {reply.status}"


def _offending(kind: Kind, status: int, code: str, content: bytes, items: list[Item]) -> set[int]:
    """Positions in ``items`` that a 409 or 422 answer names (empty when it names none)."""
    try:
        details = json.loads(content)["error"]["details"]
        if status == 422 and code == "validation_error":
            found = set()
            for detail in details:
                match = _ITEM_FIELD.match(str(detail["field"]))
                if match is None:
                    return set()
                found.add(int(match.group(1)))
            return {i for i in found if i < len(items)}
        if status == 409 and kind == "predictions":
            ids = {str(detail["id"]) for detail in details}
            return {i for i, item in enumerate(items) if item[0] in ids}
    except (ValueError, KeyError, TypeError):
        pass
    return set()


def root_url(url: str) -> str:
    """The server's root from what a user may pass: ``http://host:8000``, with or without a
    trailing ``/`` or ``/v1``."""
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base


def check_model(model: str) -> str:
    if not isinstance(model, str) or MODEL_PATTERN.fullmatch(model) is None:
        raise ValueError(f"model must match {MODEL_PATTERN.pattern}, got {model!r}")
    return model


def safe_callback(
    callback: Callable[[Incident], None] | None,
) -> Callable[[Incident], None]:
    """``callback`` wrapped so that nothing it raises reaches the monitor (it is logged)."""

    def report(incident: Incident) -> None:
        if callback is None:
            return
        try:
            callback(incident)
        except Exception:
            logger.exception("calmon: the on_error callback raised")

    return report


class ApiError(Exception):
    """A request of :class:`~calmon_client.Api` that failed for good: the server refused it
    (``status`` and ``code`` are its answer's, ``reason`` its ``code: message``), or gave no
    usable answer after every attempt (``status`` None when nothing answered, else the last
    status retried; ``reason`` what went wrong). ``url`` is the request's URL without its
    query, when known."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        reason: str = "",
        url: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        #: the server's ``code: message``, or what went wrong with the connection
        self.reason = reason or message
        self.url = url

    @property
    def transient(self) -> bool:
        """Whether the failure may pass (no usable answer: no answer at all, a status of
        :data:`RETRY_STATUSES` or a server error), as opposed to a refusal that sending the
        same request again would only repeat."""
        return self.status is None or self.status in RETRY_STATUSES or self.status >= 500


class ModelError(ApiError):
    """What :func:`~calmon_client.ensure_model` raises when it cannot make sure the model
    exists: the server refused (``status`` and ``code`` are its answer's: 401 or 403 for a
    token without the ``read`` scope, or without ``admin`` to create it; 422 for a
    configuration the server does not take; 409 ``model_limit``), or gave no usable answer
    after :data:`ENSURE_ATTEMPTS` attempts (``status`` None for a connection error)."""


class ModelConfigMismatchError(ModelError):
    """The model exists with another configuration than the one given: nothing was changed
    (``status`` 200, ``code`` ``model_config_mismatch``).

    ``differences`` maps each differing field (dotted: ``reference.windows``) to (given,
    stored); ``stored`` is the model as the server shows it. Change a model's configuration
    with ``PUT /v1/models/{model}`` on purpose (``score_kind`` and ``window`` cannot change
    once it has predictions)."""

    def __init__(
        self, model: str, differences: dict[str, tuple[Any, Any]], stored: dict[str, Any]
    ) -> None:
        shown = ", ".join(
            f"{name}: given {given!r}, stored {held!r}"
            for name, (given, held) in sorted(differences.items())
        )
        super().__init__(
            f"model {model!r} exists with another configuration ({shown})",
            status=200,
            code="model_config_mismatch",
        )
        self.differences = differences
        self.stored = stored


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What :func:`~calmon_client.ensure_model` found: the model as the server shows it (its
    full configuration, defaults filled in) and whether this call created it."""

    name: str
    created: bool
    model: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """Step: make this request (``body`` JSON already encoded, ``params`` the query); the
    driver sends back a :class:`Reply`."""

    method: Literal["GET", "PUT", "POST"]
    path: str
    body: bytes | None = None
    params: tuple[tuple[str, str], ...] = ()


def model_config(config: object) -> tuple[dict[str, Any], bytes]:
    """A configuration given to ``ensure_model`` or a monitor (None: every default) as a dict
    and as the JSON body of its ``PUT``; raises ``ValueError`` when it is no mapping with text
    keys or does not serialise as JSON (the server checks the values)."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping) or not all(isinstance(key, str) for key in config):
        raise ValueError(f"config must be a mapping with text keys, got {described(config)}")
    wanted = dict(config)
    try:
        body = json.dumps(wanted, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"config is not JSON: {exc}") from None
    return json.loads(body), body


def config_differences(
    wanted: object, stored: object, name: str = ""
) -> dict[str, tuple[Any, Any]]:
    """The fields of ``wanted`` (a configuration as given) that ``stored`` (the server's view
    of the model) holds otherwise, by dotted name. Fields left out of ``wanted`` are not
    compared (the caller did not ask for them), and values are compared by meaning: a list of
    numbers in any order (the server sorts ``pi0``), durations by their seconds (``600s`` is
    ``10m``), instants by the moment they name (``Z`` or ``+00:00``), numbers by value."""
    if isinstance(wanted, dict):
        if not isinstance(stored, dict):
            return {name: (wanted, stored)}
        out: dict[str, tuple[Any, Any]] = {}
        for key, value in wanted.items():
            out.update(config_differences(value, stored.get(key), f"{name}.{key}" if name else key))
        return out
    return {} if _same_value(wanted, stored) else {name: (wanted, stored)}


def _same_value(wanted: object, stored: object) -> bool:
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return wanted is stored
    if isinstance(wanted, int | float) and isinstance(stored, int | float):
        return float(wanted) == float(stored)
    if isinstance(wanted, list) and isinstance(stored, list):
        if all(isinstance(v, int | float) for v in [*wanted, *stored]):
            return sorted(map(float, wanted)) == sorted(map(float, stored))
        return len(wanted) == len(stored) and all(map(_same_value, wanted, stored))
    if isinstance(wanted, str) and isinstance(stored, str) and wanted != stored:
        return _same_text(wanted, stored)
    return wanted == stored


def _same_text(wanted: str, stored: str) -> bool:
    """Two texts naming the same duration or the same instant."""
    durations = [_DURATION.fullmatch(text) for text in (wanted, stored)]
    if durations[0] is not None and durations[1] is not None:
        seconds = [int(m.group(1)) * _DURATION_UNITS[m.group(2)] for m in durations if m]
        return seconds[0] == seconds[1]
    try:
        moments = [datetime.fromisoformat(text) for text in (wanted, stored)]
    except ValueError:
        return False
    if any(moment.tzinfo is None for moment in moments):
        return False
    return moments[0] == moments[1]


def ensure_steps(
    model: str, config: object, backoff: Backoff, attempts: int = ENSURE_ATTEMPTS
) -> Generator[Call | Pause, Reply | None, ModelInfo]:
    """Make sure ``model`` exists: yields the requests and pauses to make, returns what was
    found, raises :class:`ModelError` (or :class:`ModelConfigMismatchError`).

    ``GET`` the model: when it exists, compare the given fields with it
    (:func:`config_differences`) and change nothing; when the answer is 404
    ``model_not_found``, ``PUT`` the configuration (201: created). Failures that may pass
    (no answer, 408, 429, 502, 503, 504, a 500) are retried up to ``attempts`` requests of
    each kind, pausing as ``backoff`` says (a ``Retry-After`` is obeyed). Repeating the call
    is harmless: the second finds the model."""
    wanted, body = model_config(config)
    path = f"/v1/models/{check_model(model)}"
    reply = yield from call_steps(Call("GET", path), backoff, attempts, ModelError)
    if reply.status == 200:
        stored = _answer(reply)
        differences = config_differences(wanted, stored)
        if differences:
            raise ModelConfigMismatchError(model, differences, stored)
        return ModelInfo(model, False, stored)
    if reply.status != 404 or _error(reply)[0] != "model_not_found":
        raise _model_error(reply, f"reading model {model!r}")
    reply = yield from call_steps(Call("PUT", path, body), backoff, attempts, ModelError)
    if reply.status not in (200, 201):
        raise _model_error(reply, f"creating model {model!r}")
    return ModelInfo(model, reply.status == 201, _answer(reply))


def call_steps(
    call: Call,
    backoff: Backoff,
    attempts: int,
    error: type[ApiError] = ApiError,
) -> Generator[Call | Pause, Reply | None, Reply]:
    """Make ``call`` until it gets an answer that is not to be retried (which it returns, a
    refusal included), at most ``attempts`` times, pausing as ``backoff`` says between them
    (a ``Retry-After`` is obeyed). What is retried is what a batch retries: no answer, a
    status of :data:`RETRY_STATUSES`, a server error (see :func:`_retryable`). Raises
    ``error`` when the last attempt still has no usable answer."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 0
    while True:
        reply = yield call
        assert reply is not None
        if not _retryable(reply, attempt):
            return reply
        attempt += 1
        if attempt >= attempts:
            problem = reply.failure or f"{reply.status} {_error(reply)[1]}"
            raise error(
                f"{call.method} {call.path}: no usable answer after {attempts} attempts"
                f" ({problem})",
                status=reply.status or None,
                code=_error(reply)[0] if reply.status else None,
                reason=problem,
            )
        yield Pause(backoff.delay(attempt - 1, reply.retry_after))


def refused(call: Call, reply: Reply, url: str = "") -> ApiError:
    """The error of an answer ``reply`` that refuses ``call`` (a status of 400 or more)."""
    code, message = _error(reply)
    return ApiError(
        f"{call.method} {call.path}: {reply.status} {code}: {message}",
        status=reply.status,
        code=code,
        reason=f"{code}: {message}",
        url=url,
    )


def decoded(reply: Reply) -> Any:
    """The JSON value of an answer (None for an empty body); raises :class:`ApiError` when
    the body is not JSON."""
    if not reply.content:
        return None
    try:
        return json.loads(reply.content)
    except ValueError:
        raise ApiError(
            f"the server's answer ({reply.status}) is not JSON", status=reply.status
        ) from None


def _answer(reply: Reply) -> dict[str, Any]:
    try:
        answer = json.loads(reply.content)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ModelError("the server's answer is not a model", status=reply.status)
    return answer


def _model_error(reply: Reply, doing: str) -> ModelError:
    code, message = _error(reply)
    return ModelError(f"{doing}: {reply.status} {code}: {message}", status=reply.status, code=code)


def model_incident(error: ModelError) -> Incident:
    """The incident of a monitor whose model could not be ensured (``error``)."""
    return Incident("model", error.message, 0, status=error.status, code=error.code)


def transient(error: ModelError) -> bool:
    """Whether ``error`` may pass (no usable answer): a monitor tries again after a pause;
    any other refusal is final for it."""
    if isinstance(error, ModelConfigMismatchError):
        return False
    return error.transient
