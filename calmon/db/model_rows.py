"""The statements of the ``models`` table: a model read by name (plain, ``FOR SHARE`` or ``FOR
UPDATE``), every model, how many there are, a new one, and whether one has predictions. The
model registry (:mod:`calmon.services.model_registry`) validates configurations, decides what
changes and takes the registry's lock; these read and write its rows in the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from calmon.db.models import Model, Prediction


def model_named(session: Session, *, name: str, share_lock: bool = False) -> Model | None:
    """The model called ``name``, or None; with ``share_lock`` its row locked ``FOR SHARE``
    and read as the lock found it (a lock that waited reads what the other transaction
    committed)."""
    query = select(Model).where(Model.name == name)
    if share_lock:
        query = query.with_for_update(read=True).execution_options(populate_existing=True)
    return session.scalars(query).one_or_none()


def lock_model_named(session: Session, *, name: str) -> Model | None:
    """The model called ``name`` with its row locked ``FOR UPDATE``, or None."""
    return session.scalars(select(Model).where(Model.name == name).with_for_update()).one_or_none()


def all_models(session: Session, *, by_id: bool = False) -> Sequence[Model]:
    """Every model, by name (or by id, oldest first)."""
    order = Model.id if by_id else Model.name
    return session.scalars(select(Model).order_by(order)).all()


def count_models(session: Session) -> int:
    """How many models there are."""
    return session.scalar(select(func.count()).select_from(Model)) or 0


def add_model(session: Session, *, name: str, now: datetime, columns: dict[str, Any]) -> Model:
    """Store a new model with the stored ``columns`` of its configuration, flushed in a
    savepoint: a unique violation (a concurrent creation of the name committed first) raises
    :class:`~sqlalchemy.exc.IntegrityError` with only the savepoint undone."""
    with session.begin_nested():
        model = Model(name=name, created_at=now, updated_at=now, **columns)
        session.add(model)
    return model


def has_predictions(session: Session, *, model_id: int) -> bool:
    """Whether the model has any stored prediction."""
    return bool(session.scalar(select(exists().where(Prediction.model_id == model_id))))
