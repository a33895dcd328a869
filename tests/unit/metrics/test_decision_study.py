"""A small run of the pooled-decision study (``studies/decision.py``; the full table is
``bench/decisions.py``'s, in ``docs/measurements/decisions.md``): hourly windows of rare
positives against a fixed reference of two days, each hour's decision pooling back to 400
positives (the default).

- a likelihood drift lowering the calibrated AP by 20% at 60 positives an hour is paged
  within 24 hours for nearly every model (here at least 5 of 6);
- a pure prior shift (times 3) over two days pages at most one model of six, and its
  decisions say the class ratio moved;
- the decision's intervals cover the population parts of the AP change in 0.85-1.0 of the
  pooled sets that lie wholly after the change (a few dozen intervals here; the bench's
  table gives the coverage by regime).

Every number is of seeded runs, so the test is deterministic; it fails when the pooling, the
split, its intervals, the positives' test or the page rule change what they decide.
"""

from __future__ import annotations

import pytest

from studies.decision import (
    HELD_OUT_FAMILIES,
    RARE_FAMILIES,
    Regime,
    run_regime,
    summarise,
)

pytestmark = pytest.mark.slow


def test_a_likelihood_drift_at_60_positives_an_hour_is_paged_within_a_day() -> None:
    runs = run_regime(
        Regime(RARE_FAMILIES[0], 0.01, 60, drift=True), 6, 24, seed=20261126, coverage_every=2
    )
    result = summarise(runs)
    assert result.paged_within_24h >= 5, result
    assert all(window <= 10 for run in runs for window in run.windows)
    for part in ("prior", "likelihood"):
        assert result.published[part] >= 30
        assert 0.85 <= result.coverage(part) <= 1.0, (part, result)


def test_a_pure_prior_shift_pages_few_models() -> None:
    runs = run_regime(
        Regime(RARE_FAMILIES[2], 0.005, 20, factor=3.0), 6, 48, seed=20261127, coverage_every=4
    )
    result = summarise(runs)
    assert result.paged <= 1, result
    for part in ("prior", "likelihood"):
        assert 0.85 <= result.coverage(part) <= 1.0, (part, result)
    verdicts = [
        d["average_precision"]["verdict"]
        for run in runs
        for d in run.decisions
        if d["average_precision"]["likelihood_interval"] is not None
    ]
    # the ratio moved threefold: the decisions say so, and rarely that the model got worse
    assert len(verdicts) >= 60
    assert verdicts.count("class_ratio_moved") > 0.8 * len(verdicts)
    assert verdicts.count("both") + verdicts.count("model_got_worse") < 0.05 * len(verdicts)


@pytest.mark.parametrize("kind", ["mixture", "shrink"])
def test_a_held_out_label_noise_drift_is_paged_no_later_than_before(kind: str) -> None:
    """A family the page's tests were not designed on (10% of positives scoring like the
    negatives), its AP lowered by a fifth at 20 positives an hour (a share of its positives
    moved in among the negatives, or every positive shrunk toward them): paged within 24
    hours for at least 5 of 6 models, and never much later than by the page before the
    location test (Mann-Whitney and placement)."""
    regime = Regime(HELD_OUT_FAMILIES[0], 0.005, 20, drift=True, kind=kind)
    runs = run_regime(regime, 6, 24, seed=20261128, coverage_every=1000)
    after, before = summarise(runs), summarise(runs, test="before")
    assert after.paged_within_24h >= 5, (after, before)
    assert after.paged_within_24h >= before.paged_within_24h
    for run in runs:
        first, old = run.first_page(), run.first_page(test="before")
        if old is not None:
            assert first is not None
            assert first <= old + 2
