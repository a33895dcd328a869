"""A prediction batch validated against this process's copy of its model: the copy is checked
under the batch's lock of the model's row, so a configuration changed or a model created
again since the copy was read is never served from it (both backends)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import delete, select

from calmon.db.models import Base, Model, Prediction
from tests.integration.api.helpers import create_model, error_of, post_predictions, prediction


def _forget_stored_rows(client: TestClient, *, models: bool = False) -> None:
    """Delete every stored row behind the API's back (and the models with ``models``), as
    if the model never held predictions."""
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        for table in reversed(Base.metadata.sorted_tables):
            if models or table.name != Model.__tablename__:
                session.execute(delete(table))
        session.commit()


def test_a_score_kind_changed_since_the_copy_accepts_what_it_now_allows(
    client: TestClient,
) -> None:
    create_model(client, "fraud", score_kind="probability")
    assert post_predictions(client, [prediction("p-1", 0.5)]).json()["new"] == 1
    _forget_stored_rows(client)
    changed = client.put("/v1/models/fraud", json={"score_kind": "score"})
    assert changed.status_code == 200, changed.text
    # the copy says probability, which refuses 5.0: the stored model decides
    answer = post_predictions(client, [prediction("p-2", 5.0)])
    assert answer.status_code == 200, answer.text
    assert answer.json()["new"] == 1


def test_a_score_kind_changed_since_the_copy_refuses_what_it_no_longer_allows(
    client: TestClient,
) -> None:
    create_model(client, "fraud", score_kind="score")
    assert post_predictions(client, [prediction("p-1", 5.0)]).json()["new"] == 1
    _forget_stored_rows(client)
    changed = client.put("/v1/models/fraud", json={"score_kind": "probability"})
    assert changed.status_code == 200, changed.text
    answer = post_predictions(client, [prediction("p-2", 5.0)])
    assert answer.status_code == 422, answer.text
    assert error_of(answer)["details"][0]["field"] == "predictions[0].score"
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        assert session.scalars(select(Prediction.client_id)).all() == []


def test_a_model_created_again_under_its_name_takes_the_batch(client: TestClient) -> None:
    create_model(client, "fraud")
    assert post_predictions(client, [prediction("p-1")]).json()["new"] == 1
    _forget_stored_rows(client, models=True)
    create_model(client, "other")
    create_model(client, "fraud")
    assert post_predictions(client, [prediction("p-2")]).json()["new"] == 1
    factory = client.app.state.session_factory  # type: ignore[attr-defined]
    with factory() as session:
        fraud = session.scalars(select(Model.id).where(Model.name == "fraud")).one()
        stored = session.execute(select(Prediction.client_id, Prediction.model_id)).all()
        assert [tuple(row) for row in stored] == [("p-2", fraud)]
