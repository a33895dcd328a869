"""The plain-words verdict of a window and the alert states, on records built by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from calmon.catalogue import CANNOT_SEE
from calmon.metrics.intervals import wilson_interval
from calmon.ui.pages import VERDICT_CLASS, window_verdict
from calmon.ui.pages import _verdict_sentence as sentence
from calmon.ui.verdict import (
    alerts,
    calibrated_drop,
    decision_drop,
    estimate_speaks,
    estimated_prior_shift,
    pooled_prior_shift,
    prior_shift,
    read_decision,
    read_window,
    record_verdict,
)
from calmon.verdict import Estimate, Verdict, estimate_of, is_stale

REFERENCE_N, REFERENCE_POS = 80_000, 4_000  # ratio 0.05
#: the fixed reference of :func:`record` in words
FIXED = "the fixed reference 1\u20132 Nov 2026"


def record(
    *,
    ratio: float = 0.05,
    n: int = 20_000,
    prior_interval: list[float] | None = None,
    likelihood_interval: list[float] | None = None,
    calibrated_ap: float = 0.45,
    reference_ap: float = 0.46,
    estimated: list[float] | None = None,
    p_value: float | None = 0.4,
    unlabelled: int = 0,
    estimate_verdict: str | None = None,
    trailing: int | None = None,
) -> Any:
    """A window record with the fields the verdict reads; parts default to intervals around
    0 (nothing moved). Its reference is the fixed one of 1-2 Nov 2026, or the ``trailing``
    windows before it; its decision pools the window alone (the window's own split and
    verdict); its estimate's verdict is the one its interval and check give, unless
    ``estimate_verdict`` says another."""
    n_pos = round(ratio * n)
    prior_iv = prior_interval or [-0.02, 0.03]
    lik_iv = likelihood_interval or [-0.04, 0.05]
    out: Any = {
        "n": n,
        "n_pos": n_pos,
        "unlabelled": unlabelled,
        "prior": n_pos / n,
        "prior_interval": wilson_interval(n_pos, n),
        "regular": {"average_precision": 0.4},
        "calibrated": {"reference": {"average_precision": calibrated_ap}},
        "split": {
            "average_precision": {
                "total": sum(prior_iv) / 2 + sum(lik_iv) / 2,
                "prior": sum(prior_iv) / 2,
                "likelihood": sum(lik_iv) / 2,
                "prior_interval": prior_iv,
                "likelihood_interval": lik_iv,
            }
        },
        "reference": {
            "kind": "fixed" if trailing is None else "trailing",
            "start": "2026-11-01T00:00:00Z",
            "end": "2026-11-03T00:00:00Z",
            "windows": trailing,
            "n": REFERENCE_N,
            "n_pos": REFERENCE_POS,
            "prior": REFERENCE_POS / REFERENCE_N,
            "regular": {"average_precision": reference_ap},
        },
        "estimated": None
        if estimated is None
        else {
            "positive_class_ratio": sum(estimated) / 2,
            "positive_class_ratio_interval": estimated,
            "label_shift": {
                "p_value": p_value,
                "holds": None if p_value is None else p_value >= 0.01,
                "method": "cvm_pearson_mixture_bootstrap",
            },
            "verdict": estimate_of(
                check=None if p_value is None else p_value >= 0.01,
                interval=(estimated[0], estimated[1]),
                reference=REFERENCE_POS / REFERENCE_N,
            )
            if estimate_verdict is None
            else estimate_verdict,
            "cannot_see": CANNOT_SEE,
            "positive_class_ratio_resolved": True,
        },
        "advice": None,
    }
    reference = out["reference"]
    out["decision"] = {
        "windows": 1,
        "start": "2026-11-03T00:00:00Z",
        "n": n,
        "n_pos": n_pos,
        "verdict": read_window(out).verdict.value,
        "metric": "average_precision",
        "prior_part": sum(prior_iv) / 2,
        "prior_interval": prior_iv,
        "likelihood_part": sum(lik_iv) / 2,
        "likelihood_interval": lik_iv,
        "positive_class_ratio": n_pos / n,
        "positive_class_ratio_interval": wilson_interval(n_pos, n),
        "reference_positive_class_ratio_interval": wilson_interval(REFERENCE_POS, REFERENCE_N),
        "positives_shift": None,
        "reference": {key: reference[key] for key in ("kind", "start", "end", "windows")},
    }
    return out


def test_neither_when_every_interval_holds_zero_and_the_ratios_overlap() -> None:
    reading = read_window(record())
    assert reading.verdict is Verdict.STABLE
    assert reading.reference_interval == pytest.approx(tuple(wilson_interval(4_000, 80_000) or ()))


def test_class_ratio_moved_needs_the_prior_part_and_the_ratio_intervals() -> None:
    moved = record(ratio=0.008, prior_interval=[-0.30, -0.25])
    assert read_window(moved).verdict is Verdict.RATIO
    # the prior part excludes 0 but the ratio's interval overlaps the reference's
    small = record(ratio=0.0505, prior_interval=[0.001, 0.02])
    assert read_window(small).verdict is Verdict.STABLE


def test_model_got_worse_when_the_likelihood_interval_is_below_zero() -> None:
    assert read_window(record(likelihood_interval=[-0.3, -0.17])).verdict is Verdict.WORSE
    # an interval touching 0 is not enough
    assert read_window(record(likelihood_interval=[-0.3, 0.0])).verdict is Verdict.STABLE


def test_both() -> None:
    both = record(ratio=0.2, prior_interval=[0.1, 0.2], likelihood_interval=[-0.2, -0.1])
    assert read_window(both).verdict is Verdict.BOTH


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(split=None),
        lambda r: r["split"]["average_precision"].update(likelihood_interval=None),
        lambda r: r["split"]["average_precision"].update(prior_interval=None),
        lambda r: r.update(reference=None),
        lambda r: r.update(prior_interval=None),
    ],
)
def test_not_enough_data_without_an_interval(change: Any) -> None:
    r = record(ratio=0.2, prior_interval=[0.1, 0.2], likelihood_interval=[-0.2, -0.1])
    change(r)
    assert read_window(r).verdict is Verdict.UNKNOWN


def test_calibrated_drop_follows_the_alert_rule() -> None:
    # calibrated AP 0.40 < 0.95 x 0.46 and upper + 0.0935 (upper - lower) = -0.01 + 0.0187 > 0
    assert not calibrated_drop(record(calibrated_ap=0.40, likelihood_interval=[-0.21, -0.01]))
    assert calibrated_drop(record(calibrated_ap=0.40, likelihood_interval=[-0.21, -0.03]))
    # significant but not material: 0.44 >= 0.95 x 0.46 = 0.437
    assert not calibrated_drop(record(calibrated_ap=0.44, likelihood_interval=[-0.21, -0.03]))
    assert not calibrated_drop(record(calibrated_ap=0.40, likelihood_interval=None))


def test_prior_shift_both_ways_and_the_factor() -> None:
    assert prior_shift(record(ratio=0.008)) == "down"
    assert prior_shift(record(ratio=0.1)) == "up"
    assert prior_shift(record(ratio=0.07)) is None  # interval excludes 0.05 but x1.4 < x1.5
    assert prior_shift(record(ratio=0.1, n=30)) is None  # x2 but interval holds 0.05


def test_estimated_prior_shift_needs_the_whole_interval_beyond_the_band() -> None:
    def before_labels(estimated: list[float] | None) -> Any:
        return record(estimated=estimated, n=100, unlabelled=19_900)

    assert estimated_prior_shift(before_labels([0.01, 0.02])) == "down"
    assert estimated_prior_shift(before_labels([0.08, 0.09])) == "up"
    assert estimated_prior_shift(before_labels([0.02, 0.04])) is None
    assert estimated_prior_shift(before_labels(None)) is None


def test_estimated_prior_shift_needs_the_check_to_hold_and_the_labels_to_be_missing() -> None:
    for p_value in (0.002, None):
        moved = record(estimated=[0.01, 0.02], n=100, unlabelled=19_900, p_value=p_value)
        assert estimated_prior_shift(moved) is None
    # once most of the window is labelled, the measured ratio decides
    assert estimated_prior_shift(record(estimated=[0.01, 0.02], unlabelled=10)) is None


def test_an_estimated_fall_reads_as_fewer_positives_or_positives_scoring_lower() -> None:
    fell = record(estimated=[0.01, 0.02], n=100, unlabelled=19_900)
    rose = record(estimated=[0.08, 0.09], n=100, unlabelled=19_900)
    assert alerts(fell) == [
        "estimated fall (no labels needed): fewer positives, or positives scoring lower (a model"
        f" that got worse looks the same); labels will tell \u2014 against {FIXED}"
    ]
    assert alerts(rose) == [
        "estimated prior shift (no labels needed): class ratio went up, or negatives score like"
        f" positives; labels will tell \u2014 against {FIXED}"
    ]


def test_the_estimate_speaks_only_before_the_labels() -> None:
    before = record(estimated=[0.01, 0.02], n=100, unlabelled=19_900)
    assert estimate_speaks(before) is Estimate.FELL
    # the code records of shape 1 gave an estimate is no estimate verdict now
    older = record(
        estimated=[0.01, 0.02], n=100, unlabelled=19_900, estimate_verdict="class_ratio_moved"
    )
    assert estimate_speaks(older) is None
    assert estimate_speaks(record(estimated=[0.01, 0.02], unlabelled=10)) is None
    assert estimate_speaks(record(n=100, unlabelled=19_900)) is None  # no estimate


def test_scores_changed_is_an_alert_and_never_beside_an_estimated_shift() -> None:
    changed = record(
        estimated=[0.01, 0.02],
        n=100,
        unlabelled=19_900,
        p_value=0.002,
        estimate_verdict="scores_changed",
    )
    texts = alerts(changed)
    assert len(texts) == 1
    assert texts[0].startswith("scores changed in a way a class-ratio change does not explain")
    assert texts[0].endswith(f"\u2014 against {FIXED}")


def test_alerts_in_words() -> None:
    texts = alerts(record(ratio=0.008, calibrated_ap=0.3, likelihood_interval=[-0.3, -0.2]))
    assert texts == [
        f"calibrated AP drop: the model got worse \u2014 against {FIXED}",
        f"prior shift: class ratio went down \u2014 against {FIXED}",
    ]
    assert alerts(record()) == []


def test_stale_after_three_window_lengths() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert not is_stale(now - 3 * hour, now=now, length=hour)
    assert is_stale(now - 3 * hour - timedelta(seconds=1), now=now, length=hour)


def _with_decision(
    verdict: str,
    *,
    windows: int = 6,
    likelihood: float = -0.08,
    interval: list[float] | None = None,
    ratio: float = 0.05,
    ratio_interval: list[float] | None = None,
    shift_p: float = 1e-5,
) -> Any:
    """A window of 20 positives (no AP interval of its own) with a pooled decision."""
    out = record(n=400)
    out["split"]["average_precision"]["likelihood_interval"] = None
    out["decision"] = {
        "windows": windows,
        "start": "2026-11-01T06:00:00Z",
        "n": 2400,
        "n_pos": 120,
        "verdict": verdict,
        "metric": "average_precision",
        "prior_part": 0.0,
        "prior_interval": [-0.02, 0.02],
        "likelihood_part": likelihood,
        "likelihood_interval": interval or [-0.10, -0.06],
        "positive_class_ratio": ratio,
        "positive_class_ratio_interval": ratio_interval or [0.042, 0.059],
        "reference_positive_class_ratio_interval": [0.0485, 0.0515],
        "positives_shift": {
            "method": "location_and_placement",
            "z": 4.3,
            "p_value": shift_p,
            "mann_whitney_z": 4.1,
            "placement_z": 3.9,
            "location_z": 4.3,
        },
        "reference": out["decision"]["reference"],
    }
    return out


def test_the_verdict_is_the_decisions() -> None:
    assert read_window(_with_decision("model_got_worse")).verdict is Verdict.UNKNOWN
    assert record_verdict(_with_decision("model_got_worse")) is Verdict.WORSE
    assert record_verdict(_with_decision("class_ratio_moved")) is Verdict.RATIO
    assert record_verdict(_with_decision("both")) is Verdict.BOTH
    assert record_verdict(_with_decision("stable")) is Verdict.STABLE
    assert record_verdict(_with_decision("not_enough_data")) is Verdict.UNKNOWN
    assert record_verdict(_with_decision("model_may_be_worse")) is Verdict.MAYBE_WORSE
    assert (
        record_verdict(_with_decision("class_ratio_moved_model_may_be_worse"))
        is Verdict.RATIO_MAYBE_WORSE
    )
    alone = record(likelihood_interval=[-0.2, -0.1])
    assert record_verdict(alone) is Verdict.WORSE
    reading = read_decision(_with_decision("model_got_worse"))
    assert reading is not None
    assert (reading.windows, reading.n_pos, reading.likelihood_interval) == (
        6,
        120,
        (-0.10, -0.06),
    )


def test_the_decision_alerts_follow_the_rules() -> None:
    # p = 1e-5 < 0.00135 and -0.08 < -0.05·0.46: pages
    worse = _with_decision("model_got_worse")
    assert decision_drop(worse)
    assert (
        f"pooled AP drop: the model got worse over the pooled windows \u2014 against {FIXED}"
        in alerts(worse)
    )
    # the positives' shift at p = 0.002 only
    assert not decision_drop(_with_decision("model_got_worse", shift_p=0.002))
    # significant but immaterial: -0.02 > -0.05·0.46
    assert not decision_drop(
        _with_decision("model_got_worse", likelihood=-0.02, interval=[-0.025, -0.015])
    )
    moved = _with_decision("class_ratio_moved", ratio=0.02, ratio_interval=[0.012, 0.03])
    assert pooled_prior_shift(moved) == "down"
    assert (
        f"pooled prior shift: class ratio of the pooled windows went down \u2014 against {FIXED}"
        in alerts(moved)
    )
    alone = _with_decision("class_ratio_moved", windows=1, ratio=0.02, ratio_interval=[0.012, 0.03])
    assert pooled_prior_shift(alone) is None


def test_a_window_with_its_own_ap_interval_is_left_to_the_windows_own_alerts() -> None:
    pooled = _with_decision(
        "class_ratio_moved", windows=3, ratio=0.02, ratio_interval=[0.012, 0.03]
    )
    pooled["split"]["average_precision"]["likelihood_interval"] = [-0.05, 0.01]
    assert not decision_drop(pooled)
    assert pooled_prior_shift(pooled) is None
    pooled["split"]["average_precision"]["likelihood_interval"] = None
    assert decision_drop(pooled)
    assert pooled_prior_shift(pooled) == "down"


def test_a_decision_of_one_window_is_left_to_the_windows_own_alert() -> None:
    alone = _with_decision("model_got_worse", windows=1)
    assert not decision_drop(alone)
    assert not [a for a in alerts(alone) if a.startswith("pooled AP drop")]


def test_a_weaker_signal_reads_may_be_worse_with_the_tests_p_value() -> None:
    """A decision whose likelihood interval lies below 0 without the page's rule reads "may
    be worse; not yet significant", and the sentence beside it gives the test's p-value; a
    decision that pages reads "model got worse" without that sentence."""
    maybe = _with_decision("model_may_be_worse", shift_p=0.0031)
    text, css, _ = window_verdict(maybe, read_window(maybe))
    assert text == "model may be worse; not yet significant"
    assert css == VERDICT_CLASS[Verdict.MAYBE_WORSE] != VERDICT_CLASS[Verdict.WORSE]
    assert "not yet significant" in sentence(maybe, read_window(maybe))
    assert "p = 0.0031" in sentence(maybe, read_window(maybe))
    worse = _with_decision("model_got_worse")
    assert window_verdict(worse, read_window(worse))[0] == "model got worse"
    assert "not yet significant" not in sentence(worse, read_window(worse))
    assert set(VERDICT_CLASS) == set(Verdict)


def test_a_shift_the_window_shows_alone_is_left_to_the_windows_own_alert() -> None:
    """At 60 positives the window has no AP interval but its Wilson interval can leave the
    band: CalmonPriorShift speaks, CalmonPriorShiftPooled stays quiet (one alert, not two)."""
    shifted = _with_decision("class_ratio_moved", ratio=0.02, ratio_interval=[0.012, 0.03])
    shifted.update({k: v for k, v in record(n=3000, ratio=0.02).items() if k != "decision"})
    shifted["split"]["average_precision"]["likelihood_interval"] = None
    assert shifted["n_pos"] == 60
    assert prior_shift(shifted) == "down"
    assert pooled_prior_shift(shifted) is None
    assert not [a for a in alerts(shifted) if a.startswith("pooled prior shift")]
    # the same pooled shift where the window alone stays in the band: the pooled alert's
    steady = _with_decision("class_ratio_moved", ratio=0.02, ratio_interval=[0.012, 0.03])
    assert prior_shift(steady) is None
    assert pooled_prior_shift(steady) == "down"
