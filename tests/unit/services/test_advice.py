"""Which class ratio a window's advice uses (:func:`calmon.services.advice.window_prior`): its
labels when it has enough, else the label-free estimate only where its check holds."""

from __future__ import annotations

from typing import Any

import pytest

from calmon.services.advice import window_prior

LABELLED = {"n": 1000, "n_pos": 100, "prior": 0.1}
ESTIMATE = {"positive_class_ratio": 0.04}


def _estimated(check: Any) -> dict[str, Any]:
    return {**ESTIMATE, "label_shift": check}


def test_enough_labels_give_the_measured_ratio() -> None:
    assert window_prior(result=LABELLED, unlabelled=100, estimated=None) == (
        0.1,
        "measured",
        None,
    )


@pytest.mark.parametrize(
    ("result", "unlabelled"),
    [
        (LABELLED, 112),  # under 90% labelled
        ({"n": 1000, "n_pos": 29, "prior": 0.029}, 0),  # under 30 positives
        ({"n": 1000, "n_pos": 980, "prior": 0.98}, 0),  # under 30 negatives
    ],
)
def test_too_few_labels_use_the_estimate_only_where_its_check_holds(
    result: dict[str, Any], unlabelled: int
) -> None:
    held = {"p_value": 0.3, "holds": True, "method": "m"}
    assert window_prior(result=result, unlabelled=unlabelled, estimated=_estimated(held)) == (
        0.04,
        "estimated",
        None,
    )
    for check, says in (
        ({"p_value": 0.001, "holds": False, "method": "m"}, "does not hold"),
        ({"p_value": None, "holds": None, "method": "m"}, "could not be run"),
        (None, "has no label-shift check"),
    ):
        prior, source, reason = window_prior(
            result=result, unlabelled=unlabelled, estimated=_estimated(check)
        )
        assert (prior, source) == (None, None)
        assert reason is not None
        assert reason.endswith(f"label-shift check {says}")
    prior, _, reason = window_prior(result=result, unlabelled=unlabelled, estimated=None)
    assert prior is None
    assert reason is not None
    assert "no label-free estimate" in reason
