"""Population values by integration, against quadrature and against large samples."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats

from calmon.metrics import evaluate
from calmon.simulation.population import (
    average_precision,
    population_values,
    roc_auc,
    truth_document,
    upper_tail,
)
from calmon.simulation.stream import (
    DEFAULT_PHASES,
    PHASES,
    SCORE_MAP,
    Phase,
    WindowPlan,
    generate_window,
    plan_windows,
)

THRESHOLD = 0.5
REFERENCE_PRIOR = PHASES["stable"].prior


def _quad_ap(separation: float, prior: float) -> float:
    """AP by adaptive quadrature, an independent route to the same integral."""

    def integrand(t: float) -> float:
        tpr = 0.5 * math.erfc((t - separation) / math.sqrt(2))
        fpr = 0.5 * math.erfc(t / math.sqrt(2))
        density = math.exp(-0.5 * (t - separation) ** 2) / math.sqrt(2 * math.pi)
        return prior * tpr / (prior * tpr + (1 - prior) * fpr) * density

    value, _ = integrate.quad(
        integrand,
        separation - 15,
        separation + 15,
        epsabs=1e-14,
        epsrel=1e-13,
        limit=1000,
        points=[separation],
    )
    return float(value)


def test_upper_tail_matches_scipy_in_both_tails() -> None:
    x = np.array([-40.0, -8.0, -1.0, 0.0, 0.5, 3.0, 12.0, 30.0])
    np.testing.assert_allclose(upper_tail(x), stats.norm.sf(x), rtol=1e-12, atol=0)


@pytest.mark.parametrize("separation", [0.3, 1.19, 1.81, 3.5])
@pytest.mark.parametrize("prior", [0.001, 0.008, 0.05, 0.5, 0.9])
def test_average_precision_matches_adaptive_quadrature(separation: float, prior: float) -> None:
    assert average_precision(separation, prior) == pytest.approx(
        _quad_ap(separation, prior), abs=1e-10
    )


def test_average_precision_limits() -> None:
    # no separation: precision is the prior everywhere
    assert average_precision(0.0, 0.05) == pytest.approx(0.05, abs=1e-10)
    # far apart classes: every positive ranks above every negative
    assert average_precision(15.0, 0.05) == pytest.approx(1.0, abs=1e-9)


def test_roc_auc_is_the_normal_cdf_of_d_over_root_two() -> None:
    for d in (0.0, 1.0, 2.5):
        assert roc_auc(d) == pytest.approx(stats.norm.cdf(d / np.sqrt(2)), abs=1e-15)


def _large_window(phase: Phase, size: int, seed: int) -> Any:
    start = datetime(2024, 5, 1, tzinfo=UTC)
    plan = WindowPlan(index=0, phase=phase, start=start, end=start + timedelta(hours=1), size=size)
    return generate_window(plan, seed=seed)


@pytest.mark.parametrize("phase", list(PHASES))
def test_population_values_match_evaluate_on_a_very_large_sample(phase: str) -> None:
    spec = PHASES[phase]
    size = 1_000_000
    data = _large_window(spec, size, seed=99)
    prior = data.n_pos / size
    result = evaluate(
        data.scores, data.labels, threshold=THRESHOLD, pi0=[spec.prior, REFERENCE_PRIOR]
    )
    regular = result["regular"]
    at_own_prior = result["calibrated"][repr(spec.prior)]
    at_reference = result["calibrated"][repr(REFERENCE_PRIOR)]
    truth = population_values(
        spec,
        latent_threshold=SCORE_MAP.latent_threshold(THRESHOLD),
        reference_prior=REFERENCE_PRIOR,
    )
    # the sample's own prior differs from π by binomial noise: compare like with like
    assert regular["average_precision"] == pytest.approx(
        average_precision(spec.separation, prior), abs=1e-3
    )
    assert at_own_prior["average_precision"] == pytest.approx(truth["average_precision"], abs=1e-3)
    assert at_reference["average_precision"] == pytest.approx(
        truth["average_precision_calibrated"], abs=1e-3
    )
    assert regular["roc_auc"] == pytest.approx(truth["roc_auc"], abs=1e-3)
    assert regular["recall"] == pytest.approx(truth["recall"], abs=1e-3)
    assert at_own_prior["precision"] == pytest.approx(truth["precision"], abs=1e-3)
    assert at_own_prior["f1"] == pytest.approx(truth["f1"], abs=1e-3)
    assert at_reference["precision"] == pytest.approx(truth["precision_calibrated"], abs=1e-3)
    assert at_reference["f1"] == pytest.approx(truth["f1_calibrated"], abs=1e-3)


def test_population_values_at_the_edges_of_the_threshold() -> None:
    spec = PHASES["stable"]
    everything = population_values(spec, latent_threshold=-np.inf, reference_prior=0.5)
    assert everything["recall"] == 1.0
    assert everything["precision"] == pytest.approx(spec.prior)
    assert everything["precision_calibrated"] == pytest.approx(0.5)
    nothing = population_values(spec, latent_threshold=np.inf, reference_prior=0.5)
    assert nothing["recall"] == 0.0
    assert nothing["precision"] is None
    assert nothing["f1"] is None


def test_default_phases_make_the_intended_changes() -> None:
    latent = SCORE_MAP.latent_threshold(THRESHOLD)
    values = {
        name: population_values(
            PHASES[name], latent_threshold=latent, reference_prior=REFERENCE_PRIOR
        )
        for name in PHASES
    }
    stable_ap = values["stable"]["average_precision"]
    assert stable_ap is not None
    # pure prior shift: regular AP more than halves, calibrated AP and AUC do not move
    assert values["prior"]["average_precision"] < 0.45 * stable_ap  # type: ignore[operator]
    assert values["prior"]["average_precision_calibrated"] == stable_ap
    assert values["prior"]["roc_auc"] == values["stable"]["roc_auc"]
    assert values["prior"]["recall"] == values["stable"]["recall"]
    # likelihood drift at the same prior: calibrated equals regular, and AP falls
    drifted = values["likelihood"]
    assert drifted["average_precision"] == drifted["average_precision_calibrated"]
    assert drifted["average_precision"] < stable_ap - 0.2  # type: ignore[operator]


def test_truth_document() -> None:
    now = datetime(2024, 5, 1, 12, 3, tzinfo=UTC)
    plans = plan_windows(
        phases=[PHASES[name] for name in DEFAULT_PHASES],
        window="5m",
        windows_per_phase=2,
        per_window=1_000,
        now=now,
    )
    positives = [50, 49, 8, 9, 51, 52]
    doc = truth_document(
        plans=plans,
        positives=positives,
        model="sim",
        window="5m",
        seed=4,
        threshold=THRESHOLD,
        score_map=SCORE_MAP,
    )
    assert doc["model"] == "sim"
    assert doc["seed"] == 4
    assert doc["threshold"] == THRESHOLD
    assert doc["reference"]["start"] == "2024-05-01T11:30:00Z"
    assert doc["reference"]["end"] == "2024-05-01T11:40:00Z"
    assert set(doc["phases"]) == set(DEFAULT_PHASES)
    assert doc["phases"]["prior"]["prior"] == PHASES["prior"].prior
    ref_ap = average_precision(PHASES["stable"].separation, REFERENCE_PRIOR)
    assert doc["reference"]["population"]["average_precision"] == ref_ap
    rows = doc["windows"]
    assert [row["start"] for row in rows] == [f"{p.start:%Y-%m-%dT%H:%M:%S}Z" for p in plans]
    assert rows[-1]["end"] == "2024-05-01T12:00:00Z"
    assert [row["phase"] for row in rows] == [p.phase.name for p in plans]
    assert [row["n_pos"] for row in rows] == positives
    assert all(row["n"] == 1_000 for row in rows)
    for row in rows:
        phase = PHASES[row["phase"]]
        assert row["prior"] == phase.prior
        population = row["population"]
        assert population["roc_auc"] == roc_auc(phase.separation)
        assert population["average_precision"] == average_precision(phase.separation, phase.prior)
        assert population["average_precision_calibrated"] == average_precision(
            phase.separation, REFERENCE_PRIOR
        )
        change = row["average_precision_change"]
        # the split of docs/reference/metrics.md, recomputed from population APs at both priors
        window_ap, window_at_ref = (
            population["average_precision"],
            average_precision(phase.separation, REFERENCE_PRIOR),
        )
        ref_at_window = average_precision(PHASES["stable"].separation, phase.prior)
        prior = 0.5 * ((window_ap - window_at_ref) + (ref_at_window - ref_ap))
        likelihood = 0.5 * ((window_at_ref - ref_ap) + (window_ap - ref_at_window))
        assert change == {"total": prior + likelihood, "prior": prior, "likelihood": likelihood}
        assert change["total"] == pytest.approx(window_ap - ref_ap, abs=1e-15)
        if row["phase"] == "stable":
            assert change == {"total": 0.0, "prior": 0.0, "likelihood": 0.0}
        elif row["phase"] == "prior":
            assert change["likelihood"] == 0.0
            assert change["prior"] < -0.25
        else:
            assert change["prior"] == 0.0
            assert change["likelihood"] < -0.2
