"""Request bodies as Arrow IPC streams, when pyarrow is importable (the ``arrow`` extra).

A batch of predictions becomes the columns ``id``, ``timestamp`` (timestamp[us, tz=UTC], parsed
by Arrow from the ISO 8601 text the queue holds), ``score``, ``label`` and ``segment``; a batch
of labels ``id`` and ``label``. The server reads them without building a Python object per row.
:func:`encode_arrow` returns None where pyarrow is absent, where the server said it cannot read
Arrow (:func:`refuse_arrow`, after a 415), or where a value does not fit Arrow's types (an event
time Arrow cannot parse): the batch then goes as JSON, whose answer names what is wrong.
"""

from __future__ import annotations

from typing import Any, Final

try:
    import pyarrow
except ImportError:  # the arrow extra is not installed: JSON bodies
    pyarrow = None

ARROW_MEDIA_TYPE: Final = "application/vnd.apache.arrow.stream"
#: set once a server answered 415 to an Arrow body: this process sends JSON from then on
_refused: list[bool] = []
#: set once :func:`prepare_arrow` ran
_prepared: list[bool] = []


def refuse_arrow() -> None:
    """Send JSON from now on (a server answered 415: it has no pyarrow)."""
    _refused.append(True)


def prepare_arrow() -> None:
    """Load what pyarrow loads on its first array (its pandas check imports pandas where it is
    installed), once, from the thread that makes a monitor: at interpreter exit, the last
    batches' encoding could no longer import anything."""
    if pyarrow is None or _prepared:
        return
    _prepared.append(True)
    encode_arrow("labels", [("warm-up", 0, None)])


def encode_arrow(kind: str, items: list[Any]) -> bytes | None:
    """The Arrow IPC stream of a batch of ``items`` (queue tuples of ``kind``), or None when
    the batch is to go as JSON."""
    if pyarrow is None or _refused:
        return None
    pa: Any = pyarrow
    try:
        if kind == "labels":
            ids, labels, _ = zip(*items, strict=True)
            table = pa.table({"id": pa.array(ids, pa.utf8()), "label": pa.array(labels, pa.int8())})
        else:
            ids, stamps, scores, labels, segments, _ = zip(*items, strict=True)
            table = pa.table(
                {
                    "id": pa.array(ids, pa.utf8()),
                    "timestamp": pa.array(stamps, pa.utf8()).cast(pa.timestamp("us", tz="UTC")),
                    "score": pa.array(scores, pa.float64()),
                    "label": pa.array(labels, pa.int8()),
                    "segment": pa.array(segments, pa.utf8()),
                }
            )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return bytes(sink.getvalue().to_pybytes())
    except Exception:  # a value Arrow refuses, or pyarrow failing: the batch goes as JSON
        return None
