"""The order in which a scheduler tries due windows, and what came of a try.

Every scheduler process on PostgreSQL computes: it lists the due windows of every model, tries
them in a fair order, and computes a window only when it can claim it. The claim is not taken
here but by :func:`calmon.services.windows.compute.compute_window` (through
:func:`calmon.services.windows.locks.begin_window`) inside the window's own transaction
(advisory locks, released when the transaction ends, so a process killed mid-window loses
its claim and stores nothing); under the claim the window must still be due in the
transaction's snapshot, else nothing is computed. On SQLite only the leader computes.
"""

from __future__ import annotations

import enum
from itertools import zip_longest

from calmon.db.models import Model
from calmon.services.windows.planning import DueWindow


class Outcome(enum.Enum):
    """What one try of a due window came to."""

    #: computed and stored by this process
    COMPUTED = "computed"
    #: claimed elsewhere, computed meanwhile, or waiting for an older window of its model
    SKIPPED = "skipped"
    #: its state changed while it was computed (a recompute request, or another process
    #: that committed it first): nothing stored, it is planned again if still due
    CHANGED = "changed"
    #: the computation failed (logged, counted, retried after a back-off)
    FAILED = "failed"


def fair_order(
    models: list[Model], due: dict[int, list[DueWindow]]
) -> list[tuple[Model, DueWindow]]:
    """The due windows interleaved round-robin across models (in ``models``' order), so a
    model's back-fill of hundreds of windows delays another model's fresh window by at most
    one window per model with work.

    Within a model: oldest first under a trailing reference (a window's reference is made of
    the computed windows before it, so those come first); under a fixed reference the
    windows of the reference period first (computing others before them would make the
    change scan request them again, see ``refresh_for_fixed_reference``), then newest first
    (the fresh windows dashboards and alerts look at before the back-fill).
    """
    queues: list[list[tuple[Model, DueWindow]]] = []
    for model in models:
        windows = sorted(due.get(model.id, []), key=lambda window: window.start)
        if model.reference_kind == "fixed":
            windows.sort(
                key=lambda window: (not _in_period(model, window), -window.start.timestamp())
            )
        queues.append([(model, window) for window in windows])
    return [item for row in zip_longest(*queues) for item in row if item is not None]


def _in_period(model: Model, window: DueWindow) -> bool:
    """Whether the window overlaps the model's fixed reference period."""
    assert model.reference_start is not None
    assert model.reference_end is not None
    return window.end > model.reference_start and window.start < model.reference_end
