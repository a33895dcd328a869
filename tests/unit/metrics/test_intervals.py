"""Poisson bootstrap over positive blocks: draws, threshold split, interval shapes and rules."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats
from sklearn.metrics import average_precision_score, roc_auc_score

from calmon.arrays import FloatArray, Int8Array
from calmon.metrics import evaluate
from calmon.metrics import intervals as intervals_module
from calmon.metrics.curves import curve_metrics
from calmon.metrics.intervals import (
    ABSENT_REASONS,
    BELOW_ONE,
    CALIBRATED_INTERVAL_METRICS,
    MEAN_METRICS,
    MIN_AP_PRIOR,
    MIN_MEAN_TERMS,
    NO_INTERVAL,
    REAL,
    REGULAR_INTERVAL_METRICS,
    UNIT,
    UNSEEN_LOSS_EPS,
    UNSEEN_LOSS_ROWS,
    UNSEEN_ROWS,
    ap_interval_published,
    bootstrap_intervals,
    count_intervals,
    mean_intervals,
    replicate_interval,
    roc_auc_delong,
    skew_corrected_quantiles,
    t_quantile,
    unseen_row_sets,
    unseen_thresholds,
    wilson_interval,
)
from calmon.metrics.prepared import prepare
from calmon.metrics.ranking import Ranking, rank
from calmon.metrics.resampling import (
    CHUNK_CELLS,
    MAX_REPLICATES,
    MIN_REPLICATES,
    Replicates,
    cut_at,
    cut_prepared,
    cut_with_fp,
    default_replicates,
    draw_replicates,
    evaluate_replicates,
    observed,
)
from calmon.metrics.thresholded import threshold_metrics


def binormal(n: int, prior: float, mu: float, seed: int) -> tuple[FloatArray, Int8Array]:
    """Scores N(0, 1) for negatives and N(mu, 1) for positives; classes Bernoulli(prior)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < prior).astype(np.int8)
    return rng.normal(size=n) + mu * labels, labels


def probabilities(n: int, seed: int) -> tuple[FloatArray, Int8Array]:
    """Calibrated probabilities: s ~ U(0, 1), y ~ Bernoulli(s)."""
    rng = np.random.default_rng(seed)
    scores = rng.random(n)
    return scores, (rng.random(n) < scores).astype(np.int8)


def tied_set() -> tuple[FloatArray, Int8Array]:
    """Small set with ties across classes and a run of negatives straddling τ = 0.5.

    Positives sit on 0.2, 0.4, 0.6, 0.8 (several per score, some tied with negatives);
    negatives sit on a 0.05 grid, so the run strictly between 0.4 and 0.6 holds 0.45, 0.5
    and 0.55: τ = 0.5 cuts it into {0.5, 0.55} ≥ τ and {0.45} < τ.
    """
    pos = [0.8, 0.8, 0.6, 0.6, 0.6, 0.4, 0.2, 0.2, 0.95]
    neg = [0.9, 0.8, 0.7, 0.65, 0.6, 0.55, 0.55, 0.5, 0.5, 0.45, 0.4, 0.3, 0.3, 0.2, 0.1, 0.05]
    scores = np.array(pos + neg, dtype=np.float64)
    labels = np.array([1] * len(pos) + [0] * len(neg), dtype=np.int8)
    return scores, labels


def direct_counts(scores: FloatArray, labels: Int8Array, tau: float) -> tuple[int, int]:
    above = scores >= tau
    return int(np.sum(above & (labels == 1))), int(np.sum(above & (labels == 0)))


@pytest.mark.parametrize("tau", [1.0, 0.95, 0.85, 0.8, 0.55, 0.5, 0.45, 0.2, 0.15, 0.0])
def test_cut_gives_the_counts_at_tau(tau: float) -> None:
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    cut = cut_at(scores, labels, ranking, tau)
    point = observed(ranking, cut)
    assert (int(point.tp[0]), int(point.fp[0])) == direct_counts(scores, labels, tau)
    k = ranking.thresholds.size
    run = ranking.neg_above[cut.blocks] if cut.blocks < k else ranking.neg_below
    assert cut.neg_hi + cut.neg_lo == run
    assert cut.neg_hi >= 0
    assert cut.neg_lo >= 0


def test_cut_from_a_count_equals_the_cut_from_rows() -> None:
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    prepared = prepare(scores, labels, score_kind="score")
    for tau in (0.95, 0.5, 0.55, 0.0, 2.0):
        _, fp = direct_counts(scores, labels, tau)
        assert cut_with_fp(ranking, tau, fp) == cut_at(scores, labels, ranking, tau)
        assert cut_prepared(prepared, tau) == cut_at(scores, labels, ranking, tau)


def test_cut_inside_a_run_of_negatives() -> None:
    scores, labels = tied_set()
    cut = cut_at(scores, labels, rank(scores, labels), 0.5)
    # Blocks 0.95, 0.8, 0.6 are ≥ τ; the run (0.4, 0.6) holds 0.55, 0.55, 0.5, 0.5 | 0.45.
    assert (cut.blocks, cut.neg_hi, cut.neg_lo) == (3, 4, 1)


def test_replicate_counts_have_the_right_moments() -> None:
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    cut = cut_at(scores, labels, ranking, 0.5)
    b = 20_000
    reps = draw_replicates(ranking, cut, size=b, rng=np.random.default_rng(3))
    k = ranking.thresholds.size
    assert reps.pos.shape == reps.neg_tied.shape == reps.neg_above.shape == (b, k)
    assert reps.neg_below.shape == reps.tp.shape == reps.fp.shape == (b,)
    for drawn, mean in [
        (reps.pos, ranking.pos),
        (reps.neg_tied, ranking.neg_tied),
        (reps.neg_above, ranking.neg_above),
    ]:
        # Poisson: mean = variance = the block's count; 5 standard errors.
        np.testing.assert_array_less(
            np.abs(drawn.mean(axis=0) - mean), 5 * np.sqrt(mean / b) + 1e-12
        )
    tp, fp = direct_counts(scores, labels, 0.5)
    totals: list[tuple[npt.NDArray[np.int64], int]] = [
        (reps.n_pos, ranking.n_pos),
        (reps.n_neg, ranking.n_neg),
        (reps.tp, tp),
        (reps.fp, fp),
        (reps.neg_below, ranking.neg_below),
    ]
    for total, expected in totals:
        assert abs(total.mean() - expected) < 5 * math.sqrt(expected / b)
        assert total.var() == pytest.approx(expected, rel=0.06)
    # TP(τ), FP(τ) are read from the same draws as the curves.
    np.testing.assert_array_equal(reps.tp, reps.pos[:, :3].sum(axis=1))
    fp_blocks = reps.neg_above[:, :3].sum(axis=1) + reps.neg_tied[:, :3].sum(axis=1)
    assert np.all(reps.fp >= fp_blocks)
    assert np.all(reps.fp <= fp_blocks + reps.neg_above[:, 3])
    # The cut run is not degenerate: both of its parts vary.
    assert 0 < np.mean(reps.fp == fp_blocks + reps.neg_above[:, 3]) < 1


# slow: thousands of bootstrap draws
@pytest.mark.slow
def test_block_draws_reproduce_the_row_level_poisson_bootstrap() -> None:
    """Block-level replicates and a slow row-level Poisson bootstrap (each row weighted
    Poisson(1), rows repeated by weight, metrics from scikit-learn) agree in distribution."""
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    tau = 0.5
    b = 1000
    reps = draw_replicates(
        ranking, cut_at(scores, labels, ranking, tau), size=b, rng=np.random.default_rng(11)
    )
    block, _ = evaluate_replicates(ranking.thresholds, reps, [])

    rng = np.random.default_rng(12)
    rows: dict[str, list[float]] = {name: [] for name in ("tp", "fp", "roc_auc", "ap", "prec")}
    for _ in range(b):
        weights = rng.poisson(1.0, size=scores.size)
        s, y = np.repeat(scores, weights), np.repeat(labels, weights)
        tp, fp = direct_counts(s, y, tau)
        rows["tp"].append(tp)
        rows["fp"].append(fp)
        both = 0 < y.sum() < y.size
        rows["roc_auc"].append(roc_auc_score(y, s) if both else math.nan)
        rows["ap"].append(average_precision_score(y, s) if y.sum() else math.nan)
        rows["prec"].append(tp / (tp + fp) if tp + fp else math.nan)

    pairs = {
        "tp": reps.tp.astype(np.float64),
        "fp": reps.fp.astype(np.float64),
        "roc_auc": block["roc_auc"],
        "ap": block["average_precision"],
        "prec": block["precision"],
    }
    for name, block_values in pairs.items():
        row_values = np.asarray(rows[name], dtype=np.float64)
        assert np.isnan(block_values).mean() == pytest.approx(np.isnan(row_values).mean(), abs=0.01)
        bv, rv = block_values[np.isfinite(block_values)], row_values[np.isfinite(row_values)]
        se = math.sqrt(bv.var() / bv.size + rv.var() / rv.size)
        assert abs(bv.mean() - rv.mean()) < 4 * se, name
        assert bv.std() == pytest.approx(rv.std(), rel=0.1), name
        assert stats.ks_2samp(bv, rv).pvalue > 1e-3, name


def test_replicate_evaluation_matches_ranking_the_resampled_rows() -> None:
    """One replicate evaluated from its block counts equals the same replicate materialised as
    rows (each block's rows repeated by its drawn count) and ranked from scratch."""
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    cut = cut_at(scores, labels, ranking, 0.5)
    reps = draw_replicates(ranking, cut, size=50, rng=np.random.default_rng(5))
    values, _ = evaluate_replicates(ranking.thresholds, reps, [])
    for i in range(50):
        # A negative stands for its run; place it at a score inside the run on the right side of τ.
        s_rows: list[float] = []
        y_rows: list[int] = []
        edges = np.append(np.inf, ranking.thresholds)
        for k, t in enumerate(ranking.thresholds):
            s_rows += [t] * int(reps.pos[i, k] + reps.neg_tied[i, k])
            y_rows += [1] * int(reps.pos[i, k]) + [0] * int(reps.neg_tied[i, k])
            if k != cut.blocks:
                mid = t + 0.01 if math.isfinite(edges[k]) else t + 1.0
                s_rows += [mid] * int(reps.neg_above[i, k])
                y_rows += [0] * int(reps.neg_above[i, k])
        s_rows += [ranking.thresholds[-1] - 1.0] * int(reps.neg_below[i])
        y_rows += [0] * int(reps.neg_below[i])
        run = int(reps.neg_above[i, cut.blocks])
        hi = int(reps.fp[i]) - int(
            reps.neg_above[i, : cut.blocks].sum() + reps.neg_tied[i, : cut.blocks].sum()
        )
        s_rows += [0.55] * hi + [0.45] * (run - hi)
        y_rows += [0] * run
        s, y = np.array(s_rows), np.array(y_rows, dtype=np.int8)
        if 0 < y.sum() < y.size:
            assert values["roc_auc"][i] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
            assert values["average_precision"][i] == pytest.approx(
                average_precision_score(y, s), abs=1e-12
            )
        assert (int(reps.tp[i]), int(reps.fp[i])) == direct_counts(s, y, 0.5)


def test_chunks_keep_memory_bounded() -> None:
    """K = 10^5 blocks: the bootstrap's peak allocation stays near the chunk budget."""
    scores, labels = binormal(400_000, 0.25, 1.0, seed=1)
    ranking = rank(scores, labels)
    assert ranking.thresholds.size == pytest.approx(100_000, rel=0.01)
    prepared = prepare(scores, labels, score_kind="score")
    tracemalloc.start()
    try:
        out = bootstrap_intervals(prepared, threshold=1.0, pi0=[0.5], replicates=25, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["regular"]["roc_auc"] is not None
    print(f"peak {peak / 2**20:.0f} MiB for K = {ranking.thresholds.size}, {CHUNK_CELLS} cells")
    assert peak < 100 * 2**20


def typical() -> tuple[FloatArray, Int8Array, Ranking]:
    scores, labels = binormal(5000, 0.1, 1.5, seed=21)
    return scores, labels, rank(scores, labels)


def test_shapes_and_keys() -> None:
    scores, labels, _ = typical()
    out = bootstrap_intervals(
        prepare(scores, labels, score_kind="score"),
        threshold=1.0,
        pi0=[0.5, 0.01],
        replicates=200,
        seed=1,
    )
    assert set(out) == {"regular", "calibrated", "absent"}
    assert set(out["regular"]) == set(REGULAR_INTERVAL_METRICS) | {"ks_abc"}
    assert set(out["calibrated"]) == {"0.5", "0.01"}
    for metrics in out["calibrated"].values():
        assert set(metrics) == set(CALIBRATED_INTERVAL_METRICS)
    # π̂ = 0.1014: AP at π0 = 0.01 gets no interval (MIN_AP_PRIOR), nor the maxima and AUPRG.
    absent = {("regular", name) for name in NO_INTERVAL}
    absent |= {(p, name) for p in ("0.5", "0.01") for name in NO_INTERVAL if name != "ks"}
    absent.add(("0.01", "average_precision"))
    found = [(("regular", k), v) for k, v in out["regular"].items()] + [
        ((p, k), v) for p, m in out["calibrated"].items() for k, v in m.items()
    ]
    for key, interval in found:
        if key in absent:
            assert interval is None, key
            continue
        assert isinstance(interval, list), key
        assert len(interval) == 2
        assert all(isinstance(x, float) for x in interval)
        assert interval[0] <= interval[1]
    reasons = {("regular", k): v for k, v in out["absent"]["regular"].items()}
    reasons |= {(p, k): v for p, m in out["absent"]["calibrated"].items() for k, v in m.items()}
    assert set(reasons) == absent
    assert reasons.pop(("0.01", "average_precision")) == "prior_out_of_range"
    assert set(reasons.values()) == {"no_method"}


def test_absent_intervals_say_why() -> None:
    """Every None carries a code of ABSENT_REASONS naming its cause: too few rows of a class
    for a mean, a class missing, nothing flagged at τ, a prior where AP does not cover."""
    rng = np.random.default_rng(3)
    labels = np.r_[np.ones(6), np.zeros(300)].astype(np.int8)
    scores = np.r_[rng.uniform(0.3, 0.45, 6), rng.uniform(0.0, 0.45, 300)]
    out = bootstrap_intervals(
        prepare(scores, labels, score_kind="probability"),
        threshold=0.5,
        pi0=[0.5],
        seed=1,
        score_kind="probability",
    )
    regular = out["absent"]["regular"]
    assert regular["ks_abc"] == "too_few_positives"
    assert regular["brier_pos"] == "too_few_positives"
    assert regular["precision"] == "undefined"  # nothing at or above τ
    assert regular["average_precision"] == "prior_out_of_range"  # π̂ = 0.02
    assert "brier_neg" not in regular
    assert out["regular"]["brier_neg"] is not None
    assert set(regular.values()) <= set(ABSENT_REASONS)
    assert out["absent"]["calibrated"]["0.5"]["precision"] == "undefined"
    negatives_only = bootstrap_intervals(
        prepare(scores[6:], labels[6:], score_kind="probability"),
        threshold=0.5,
        pi0=[0.5],
        seed=1,
        score_kind="probability",
    )["absent"]["regular"]
    assert negatives_only["roc_auc"] == "undefined"
    assert negatives_only["brier_pos"] == "undefined"
    assert negatives_only["brier_skill"] == "undefined"
    assert "brier_neg" not in negatives_only
    constant = bootstrap_intervals(
        prepare(
            np.r_[np.full(20, 0.9), scores[6:]],
            np.r_[np.ones(20), labels[6:]].astype(np.int8),
            score_kind="probability",
        ),
        threshold=0.5,
        pi0=[],
        seed=1,
        score_kind="probability",
    )["absent"]["regular"]
    assert constant["brier_pos"] == "constant_scores"


def test_probability_models_get_mean_metric_intervals() -> None:
    scores, labels = probabilities(3000, seed=2)
    out = bootstrap_intervals(
        prepare(scores, labels, score_kind="score"),
        threshold=0.5,
        pi0=[],
        replicates=50,
        seed=1,
        score_kind="probability",
    )
    assert set(out["regular"]) == set(REGULAR_INTERVAL_METRICS) | set(MEAN_METRICS) | {"ks_abc"}
    assert out["calibrated"] == {}


def test_same_seed_same_intervals() -> None:
    scores, labels, _ = typical()

    def run(seed: int) -> dict[str, object]:
        return bootstrap_intervals(
            prepare(scores, labels, score_kind="score"),
            threshold=1.0,
            pi0=[0.5],
            replicates=100,
            seed=seed,
        )

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_intervals_contain_the_point_estimate() -> None:
    scores, labels, ranking = typical()
    pi0 = [0.5, 0.02]
    out = bootstrap_intervals(
        prepare(scores, labels, score_kind="score"), threshold=1.0, pi0=pi0, seed=3
    )
    regular, calibrated = evaluate_replicates(
        ranking.thresholds, observed(ranking, cut_at(scores, labels, ranking, 1.0)), pi0
    )
    for name in REGULAR_INTERVAL_METRICS:
        interval = out["regular"][name]
        if name in NO_INTERVAL:
            assert interval is None
            continue
        lo, hi = interval
        assert lo <= regular[name][0] <= hi, name
        assert lo < hi, name
    for p in pi0:
        for name in CALIBRATED_INTERVAL_METRICS:
            interval = out["calibrated"][repr(p)][name]
            prior = float(labels.mean())
            if name in NO_INTERVAL or (
                name == "average_precision" and not ap_interval_published(p, prior)
            ):
                assert interval is None
                continue
            lo, hi = interval
            assert lo <= calibrated[p][name][0] <= hi, (p, name)


def test_width_shrinks_as_one_over_root_n() -> None:
    widths = []
    for n in (4000, 16000):
        scores, labels = binormal(n, 0.2, 1.5, seed=n)
        out = bootstrap_intervals(
            prepare(scores, labels, score_kind="score"), threshold=1.0, pi0=[0.5], seed=0
        )
        intervals = {**out["regular"], **{f"c_{k}": v for k, v in out["calibrated"]["0.5"].items()}}
        widths.append({k: v[1] - v[0] for k, v in intervals.items() if v is not None})
    for name in (
        "roc_auc",
        "average_precision",
        "precision",
        "recall",
        "fpr",
        "f1",
        "c_precision",
        "c_f1",
        "c_average_precision",
    ):
        ratio = widths[0][name] / widths[1][name]
        assert 1.6 < ratio < 2.5, (name, ratio)


def test_undefined_sets_give_none() -> None:
    scores = np.linspace(0, 1, 50)
    negatives = np.zeros(50, dtype=np.int8)
    out = bootstrap_intervals(
        prepare(scores, negatives, score_kind="score"), threshold=0.5, pi0=[0.5], seed=0
    )
    assert out["regular"]["fpr"] is not None
    for name in REGULAR_INTERVAL_METRICS:
        if name != "fpr":
            assert out["regular"][name] is None, name
    assert all(v is None for v in out["calibrated"]["0.5"].values())

    # Positives only: recall keeps its interval, nothing that compares the classes has one.
    out = bootstrap_intervals(
        prepare(scores, 1 - negatives, score_kind="score"), threshold=0.5, pi0=[0.5], seed=0
    )
    assert out["regular"]["recall"] is not None
    for name in ("precision", "fpr", "f1", "roc_auc", "average_precision", "best_f1", "ks"):
        assert out["regular"][name] is None, name
    assert all(v is None for v in out["calibrated"]["0.5"].values())

    # One positive: a third of the replicates lose it, too few are defined for the curves;
    # recall is a count (Wilson).
    single = (scores == scores[40]).astype(np.int8)
    out = bootstrap_intervals(prepare(scores, single, score_kind="score"), threshold=0.5, pi0=[0.5])
    for name in ("roc_auc", "average_precision"):
        assert out["regular"][name] is None, name
    assert out["regular"]["recall"] == wilson_interval(1, 1)

    # τ above every score: precision is undefined, recall is a sure 0.
    scores, labels, _ = typical()
    out = bootstrap_intervals(
        prepare(scores, labels, score_kind="score"), threshold=99.0, pi0=[0.5], seed=0
    )
    assert out["regular"]["precision"] is None
    assert out["calibrated"]["0.5"]["precision"] is None
    n_pos = int(labels.sum())
    assert out["regular"]["recall"] == wilson_interval(0, n_pos)
    assert 0.0 < out["regular"]["recall"][1] < 0.01
    assert out["regular"]["roc_auc"] is not None


def test_bad_arguments_are_refused() -> None:
    scores, labels, _ = typical()
    with pytest.raises(ValueError, match="level"):
        bootstrap_intervals(
            prepare(scores, labels, score_kind="score"), threshold=0.5, pi0=[], level=1.0
        )
    with pytest.raises(ValueError, match="replicates"):
        bootstrap_intervals(
            prepare(scores, labels, score_kind="score"), threshold=0.5, pi0=[], replicates=0
        )


def classes(scores: FloatArray, labels: Int8Array) -> tuple[FloatArray, FloatArray]:
    """Each class's scores, ascending (as ``PreparedSet`` holds them)."""
    prepared = prepare(scores, labels, score_kind="probability")
    return prepared.pos_sorted, prepared.neg_sorted


def t975(df: float) -> float:
    return float(stats.t.ppf(0.975, df))


def hall_quantiles(q: float, skew: float, curvature: float) -> tuple[float, float]:
    """h⁻¹(-q), h⁻¹(q) for Hall's h(t) = t + a·t² + a²·t³/3 + b, by bisection (h increases)."""
    a, b = skew / 3 + curvature / 2, skew / 6

    def solve(target: float) -> float:
        low, high = -50.0, 50.0
        for _ in range(200):
            mid = (low + high) / 2
            if mid + a * mid * mid + a * a * mid**3 / 3 + b < target:
                low = mid
            else:
                high = mid
        return (low + high) / 2

    return solve(-q), solve(q)


@pytest.mark.parametrize("decimals", [None, 2])
def test_mean_intervals(decimals: int | None) -> None:
    """Each metric's per-row terms, computed row by row here: Brier scores on the logit scale
    and log loss on the log scale, g(mean) - se·g'(mean)·[upper, lower] with Hall's
    skewness-corrected quantiles of Student's t at m - 1 degrees of freedom (skewness
    mean((t - mean)³)/(sd³·√m), curvature se·g''/g'); ks_abc with Welch's degrees of freedom
    and the skewness of the difference; with heavy ties (2 decimals) the sums over runs of
    tied scores give the same intervals."""
    scores, labels = probabilities(4000, seed=8)
    if decimals is not None:
        scores = np.round(scores, decimals)
    out = mean_intervals(*classes(scores, labels), score_kind="probability")
    y = labels.astype(np.float64)
    clipped = np.clip(scores, 1e-15, 1 - 1e-15)
    terms = {
        "brier": (scores - y) ** 2,
        "brier_pos": (scores[y == 1] - 1) ** 2,
        "brier_neg": scores[y == 0] ** 2,
        "log_loss": -(y * np.log(clipped) + (1 - y) * np.log(1 - clipped)),
    }
    for name, values in terms.items():
        mean, m = values.mean(), values.size
        sd = values.std(ddof=1)
        se = sd / math.sqrt(m)
        skew = np.mean((values - mean) ** 3) / (sd**3 * math.sqrt(m))
        if name == "log_loss":
            slope, curvature, g, back = 1 / mean, -1 / mean, np.log, np.exp
        else:
            slope, curvature = 1 / (mean * (1 - mean)), (2 * mean - 1) / (mean * (1 - mean))
            g, back = special.logit, special.expit
        lower, upper = hall_quantiles(t975(m - 1), skew, se * curvature)
        expected = back(g(mean) - se * slope * np.array([upper, lower]))
        interval = out[name]
        assert interval is not None
        np.testing.assert_allclose(interval, expected, rtol=1e-6, atol=1e-12, err_msg=name)
    # brier_skill = 1 - B/(p(1-p)): delta method, from each row's influence on the estimate.
    t, p = terms["brier"], y.mean()
    brier, spread = t.mean(), p * (1 - p)
    influence = -(t - brier) / spread + brier * (1 - 2 * p) / spread**2 * (y - p)
    half = 1.959963984540054 * influence.std(ddof=1) / math.sqrt(t.size)
    skill = 1 - brier / spread
    interval = out["brier_skill"]
    assert interval is not None
    np.testing.assert_allclose(interval, [skill - half, skill + half], rtol=0, atol=1e-12)
    pos, neg = scores[y == 1], scores[y == 0]
    s1, s0 = pos.var(ddof=1) / pos.size, neg.var(ddof=1) / neg.size
    df = (s1 + s0) ** 2 / (s1**2 / (pos.size - 1) + s0**2 / (neg.size - 1))
    third = np.mean((pos - pos.mean()) ** 3) / pos.size**2
    third -= np.mean((neg - neg.mean()) ** 3) / neg.size**2
    se = math.sqrt(s1 + s0)
    lower, upper = hall_quantiles(t975(df), third / se**3, 0.0)
    diff = pos.mean() - neg.mean()
    ks_abc = out["ks_abc"]
    assert ks_abc is not None
    np.testing.assert_allclose(ks_abc, [diff - se * upper, diff - se * lower], rtol=1e-6)
    assert set(out) == {*terms, "ks_abc", "brier_skill"}
    assert mean_intervals(*classes(scores, labels), score_kind="score").keys() == {"ks_abc"}
    wider = mean_intervals(*classes(scores, labels), score_kind="probability", level=0.99)
    assert wider["brier"] is not None
    assert out["brier"] is not None
    assert wider["brier"][1] - wider["brier"][0] > out["brier"][1] - out["brier"][0]


def test_mean_intervals_of_few_skewed_terms_reach_higher() -> None:
    """20 positives scoring high: the (1 - s)² terms are small and right-skewed, so the
    interval of brier_pos reaches further above the mean than below it (a symmetric normal
    interval missed high in 9-10% of such sets), and it is wider than mean ± 1.96·se."""
    rng = np.random.default_rng(3)
    scores = np.r_[rng.beta(4, 1.5, 20), rng.beta(2, 4, 80)]
    labels = np.r_[np.ones(20), np.zeros(80)].astype(np.int8)
    out = mean_intervals(*classes(scores, labels), score_kind="probability")
    terms = (1 - scores[:20]) ** 2
    mean, se = terms.mean(), terms.std(ddof=1) / math.sqrt(20)
    interval = out["brier_pos"]
    assert interval is not None
    assert interval[1] - mean > mean - interval[0] > 0
    assert interval[1] - interval[0] > 2 * 1.959963984540054 * se


@pytest.mark.parametrize("constant", ["positives", "negatives", "both"])
def test_mean_intervals_of_a_constant_class_are_none(constant: str) -> None:
    """A class whose scores are all equal gives no estimate of its population's spread (not a
    spread of 0): the means over it get None, not a zero-width interval."""
    rng = np.random.default_rng(4)
    pos = np.full(30, 0.8) if constant != "negatives" else rng.uniform(0.4, 1.0, 30)
    neg = np.full(70, 0.3) if constant != "positives" else rng.uniform(0.0, 0.6, 70)
    scores = np.concatenate([pos, neg])
    labels = np.r_[np.ones(30), np.zeros(70)].astype(np.int8)
    out = mean_intervals(*classes(scores, labels), score_kind="probability")
    assert out["ks_abc"] is None
    assert (out["brier_pos"] is None) == (constant != "negatives")
    assert (out["brier_neg"] is None) == (constant != "positives")
    for name in ("brier_pos", "brier_neg", "brier", "log_loss"):
        interval = out[name]
        assert interval is None or interval[1] > interval[0], name
    tied = np.round(scores, 1)  # the sums over runs of tied scores
    out = mean_intervals(*classes(tied, labels), score_kind="probability")
    assert out["ks_abc"] is None
    assert (out["brier_pos"] is None) == (constant != "negatives")


def test_mean_intervals_need_min_mean_terms_per_class() -> None:
    """Below MIN_MEAN_TERMS rows in a class the means over it publish none."""
    rng = np.random.default_rng(5)
    few = MIN_MEAN_TERMS - 1
    scores = np.r_[rng.uniform(0.3, 1.0, few), rng.uniform(0.0, 0.7, 200)]
    labels = np.r_[np.ones(few), np.zeros(200)].astype(np.int8)
    out = mean_intervals(*classes(scores, labels), score_kind="probability")
    assert out["brier_pos"] is None
    assert out["ks_abc"] is None
    assert out["brier_neg"] is not None
    assert out["brier"] is not None
    enough = np.r_[rng.uniform(0.3, 1.0, 1), scores]
    out = mean_intervals(
        *classes(enough, np.r_[1, labels].astype(np.int8)), score_kind="probability"
    )
    assert out["brier_pos"] is not None
    assert out["ks_abc"] is not None


def test_mean_intervals_edge_cases() -> None:
    perfect = np.tile([0.0, 1.0], 10)
    labels = np.tile([0, 1], 10).astype(np.int8)
    out = mean_intervals(*classes(perfect, labels), score_kind="probability")
    assert out["brier"] is None
    assert out["ks_abc"] is None
    one_pos = np.r_[np.zeros(12), 1].astype(np.int8)
    out = mean_intervals(
        *classes(np.r_[np.linspace(0.1, 0.3, 12), 0.9], one_pos), score_kind="probability"
    )
    assert out["brier_pos"] is None
    assert out["ks_abc"] is None
    assert out["brier_neg"] is not None
    only_negatives = np.zeros(4, dtype=np.int8)
    out = mean_intervals(
        *classes(np.array([0.1, 0.2, 0.3, 0.9]), only_negatives), score_kind="probability"
    )
    assert out["brier_skill"] is None


def test_skew_corrected_quantiles() -> None:
    """Hall's cubic h(t) = t + a·t² + a²·t³/3 + b, a = skew/3 + curvature/2, b = skew/6: the
    quantiles are h⁻¹(∓q); without skew or curvature Student's (-q, q); a right-skewed
    estimate (skew > 0) makes the studentized estimate skewed left, so the lower quantile
    reaches further from 0 than the upper one (the interval θ̂ - se·[upper, lower] reaches
    further above θ̂), and both move down by about b."""
    q = 2.0
    assert skew_corrected_quantiles(q, 0.0) == (-q, q)
    for skew, curvature in ((0.3, 0.0), (-0.5, 0.0), (0.2, -0.1), (0.0, 0.2), (1.5, 0.0)):
        a, b = skew / 3 + curvature / 2, skew / 6
        lower, upper = skew_corrected_quantiles(q, skew, curvature)
        for t, target in ((lower, -q), (upper, q)):
            assert t + a * t * t + a * a * t**3 / 3 + b == pytest.approx(target, abs=1e-12)
    lower, upper = skew_corrected_quantiles(q, 0.3)
    assert -lower > q > upper
    mirrored = skew_corrected_quantiles(q, -0.3)
    assert mirrored == pytest.approx((-upper, -lower), abs=1e-12)


def mirrored(rng: np.random.Generator, centre: float, spread: float, n: int) -> FloatArray:
    """2n scores symmetric about ``centre``: their sample third central moment is 0."""
    half = rng.uniform(0.0, spread, n)
    out: FloatArray = np.concatenate([centre - half, centre + half])
    return out


def test_ks_abc_of_symmetric_classes_is_welch() -> None:
    """Scores symmetric about each class's mean have no skewness, and the interval of ks_abc
    is Welch's: diff ± t·se at the Welch degrees of freedom."""
    rng = np.random.default_rng(12)
    pos, neg = mirrored(rng, 0.7, 0.25, 400), mirrored(rng, 0.3, 0.2, 1200)
    scores = np.r_[pos, neg]
    labels = np.r_[np.ones(pos.size), np.zeros(neg.size)].astype(np.int8)
    s1, s0 = pos.var(ddof=1) / pos.size, neg.var(ddof=1) / neg.size
    df = (s1 + s0) ** 2 / (s1**2 / (pos.size - 1) + s0**2 / (neg.size - 1))
    half = t975(df) * math.sqrt(s1 + s0)
    diff = pos.mean() - neg.mean()
    interval = mean_intervals(*classes(scores, labels), score_kind="score")["ks_abc"]
    assert interval is not None
    np.testing.assert_allclose(interval, [diff - half, diff + half], rtol=1e-6, atol=1e-9)


def test_mean_interval_of_symmetric_terms_is_symmetric() -> None:
    """Brier terms symmetric about their mean (no skewness): the logit scale alone would
    reach further above the mean than below it (its curvature), and the correction for that
    curvature takes it back to mean ± t·se to second order: the two sides differ by far less
    than on the logit scale alone."""
    rng = np.random.default_rng(15)
    terms = mirrored(rng, 0.3, 0.25, 1000)
    pos = 1.0 - np.sqrt(terms)
    neg = rng.uniform(0.2, 0.6, 2000)
    scores = np.r_[pos, neg]
    labels = np.r_[np.ones(pos.size), np.zeros(neg.size)].astype(np.int8)
    interval = mean_intervals(*classes(scores, labels), score_kind="probability")["brier_pos"]
    assert interval is not None
    mean, m = terms.mean(), terms.size
    half = t975(m - 1) * terms.std(ddof=1) / math.sqrt(m)
    np.testing.assert_allclose(interval, [mean - half, mean + half], rtol=2e-4)
    slope = 1 / (mean * (1 - mean))
    logit = special.expit(special.logit(mean) + np.array([-half, half]) * slope)
    asymmetry = (interval[1] - mean) - (mean - interval[0])
    assert abs(asymmetry) < 0.1 * ((logit[1] - mean) - (mean - logit[0]))


def test_ks_abc_with_a_rare_low_component_reaches_further_below() -> None:
    """Positives with 5% scored like negatives: their mean, and so ks_abc, is skewed left; the
    interval reaches further below the difference than above it, below Welch's lower bound
    and above its upper one (the sample's unseen rows add less than either shift here)."""
    rng = np.random.default_rng(13)
    pos = np.r_[rng.beta(8, 2, 1900), rng.beta(1, 20, 100)]
    neg = rng.beta(2, 8, 4000)
    scores = np.r_[pos, neg]
    labels = np.r_[np.ones(pos.size), np.zeros(neg.size)].astype(np.int8)
    interval = mean_intervals(*classes(scores, labels), score_kind="score")["ks_abc"]
    assert interval is not None
    s1, s0 = pos.var(ddof=1) / pos.size, neg.var(ddof=1) / neg.size
    df = (s1 + s0) ** 2 / (s1**2 / (pos.size - 1) + s0**2 / (neg.size - 1))
    half = t975(df) * math.sqrt(s1 + s0)
    diff = pos.mean() - neg.mean()
    assert diff - interval[0] > half > interval[1] - diff > 0


def test_ks_abc_interval_balances_its_misses_on_skewed_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Coverage by simulation, without the unseen rows (UNSEEN_ROWS = 0): 30 positives from
    0.9·Beta(8, 2) + 0.1·Beta(1, 15) (a rare low component, E[s] = 0.72625) and 200 negatives
    from Beta(2, 8) (0.2), 4,000 sets. Welch's symmetric interval covered 0.926, missing with
    the population value below it in 6.8% of the sets and above it in 0.6%; the
    skewness-corrected one covers 0.951 (3.5% and 1.4%)."""
    monkeypatch.setattr(intervals_module, "UNSEEN_ROWS", 0)
    truth = 0.9 * 0.8 + 0.1 / 16 - 0.2
    rng = np.random.default_rng(14)
    sets, below, above = 4000, 0, 0
    for _ in range(sets):
        low = rng.random(30) < 0.1
        pos = np.where(low, rng.beta(1, 15, 30), rng.beta(8, 2, 30))
        neg = rng.beta(2, 8, 200)
        interval = mean_intervals(np.sort(pos), np.sort(neg), score_kind="score")["ks_abc"]
        assert interval is not None
        below += truth < interval[0]
        above += truth > interval[1]
    assert 0.94 <= 1 - (below + above) / sets <= 0.96, (below, above)
    assert below - above < 0.03 * sets, (below, above)


def test_replicates_of_the_set_itself() -> None:
    scores, labels = tied_set()
    ranking = rank(scores, labels)
    point = observed(ranking, cut_at(scores, labels, ranking, 0.5))
    assert isinstance(point, Replicates)
    assert int(point.n_pos[0]) == ranking.n_pos
    assert int(point.n_neg[0]) == ranking.n_neg


def test_default_replicates() -> None:
    assert default_replicates(0) == MAX_REPLICATES
    assert default_replicates(200) == MAX_REPLICATES
    assert default_replicates(5_000) == 200
    assert default_replicates(10_000) == MIN_REPLICATES
    assert default_replicates(10**6) == MIN_REPLICATES


def test_replicate_interval_is_a_bias_corrected_normal_interval_on_the_logit_scale() -> None:
    rng = np.random.default_rng(4)
    point = 0.3
    shift = 0.05  # the replicates sit 0.05 above the point on the logit scale
    g = special.logit(point) + shift + 0.1 * rng.standard_normal(1000)
    values = special.expit(g)
    interval = replicate_interval(values, point, level=0.9, scale=UNIT)
    assert interval is not None
    centre = special.logit(point) - (g.mean() - special.logit(point))
    half = stats.norm.ppf(0.95) * g.std(ddof=1)
    np.testing.assert_allclose(interval, special.expit([centre - half, centre + half]), rtol=1e-9)


def test_replicate_interval_scales() -> None:
    rng = np.random.default_rng(5)
    # AUPRG: ≤ 1, any sign; the upper end never passes 1.
    values = 1 - np.exp(rng.normal(0.0, 2.0, 500))
    interval = replicate_interval(values, float(np.median(values)), level=0.95, scale=BELOW_ONE)
    assert interval is not None
    assert interval[0] < 0 < interval[1] < 1
    # Differences: plain normal interval, centre 2·point - mean.
    values = rng.normal(0.1, 0.02, 500)
    interval = replicate_interval(values, 0.11, level=0.95, scale=REAL)
    assert interval is not None
    centre, half = 0.22 - values.mean(), stats.norm.ppf(0.975) * values.std(ddof=1)
    np.testing.assert_allclose(interval, [centre - half, centre + half], rtol=1e-9)


def test_replicate_interval_on_the_bounds_is_never_narrower_than_wilson() -> None:
    """A value on a bound: the hull of the percentile interval and the Wilson interval of the
    point over ``events`` trials; without ``events`` the percentile interval."""
    ones = np.ones(100)
    assert replicate_interval(ones, 1.0, level=0.95, scale=UNIT) == [1.0, 1.0]
    interval = replicate_interval(ones, 1.0, level=0.95, scale=UNIT, events=5)
    assert interval == wilson_interval(5, 5)
    assert interval is not None
    assert interval[0] < 0.6
    values = np.r_[np.zeros(10), np.linspace(0.1, 0.5, 90)]
    percentiles = list(np.quantile(values, [0.025, 0.975]))
    assert replicate_interval(values, 0.3, level=0.95, scale=UNIT) == percentiles
    wide = replicate_interval(values, 0.3, level=0.95, scale=UNIT, events=10)
    assert wide == [0.0, wilson_interval(3, 10)[1]]  # type: ignore[index]
    narrow = replicate_interval(values, 0.3, level=0.95, scale=UNIT, events=10_000)
    assert narrow == percentiles


def test_replicate_interval_none_rules() -> None:
    enough = np.r_[np.full(10, np.nan), np.linspace(0.1, 0.5, 90)]  # 90% defined
    too_few = np.r_[np.full(11, np.nan), np.linspace(0.1, 0.5, 89)]
    assert replicate_interval(enough, 0.3, level=0.95, scale=UNIT) is not None
    assert replicate_interval(too_few, 0.3, level=0.95, scale=UNIT) is None
    assert replicate_interval(enough, math.nan, level=0.95, scale=UNIT) is None


def test_wilson_interval_ends_solve_the_score_equation() -> None:
    """Each end p of the Wilson interval of k of n satisfies |k/n - p| = z·√(p(1 - p)/n)."""
    z = stats.norm.ppf(0.975)
    for k, n in ((0, 7), (3, 3), (2, 40), (17, 60), (5000, 10_000)):
        interval = wilson_interval(k, n)
        assert interval is not None
        for end in interval:
            if 0.0 < end < 1.0:
                assert abs(k / n - end) == pytest.approx(z * math.sqrt(end * (1 - end) / n))
    assert wilson_interval(0, 0) is None


@pytest.mark.parametrize("n", [1, 2, 3, 20])
def test_wilson_interval_has_width_at_every_count(n: int) -> None:
    for k in range(n + 1):
        interval = wilson_interval(k, n)
        assert interval is not None
        lo, hi = interval
        assert 0.0 <= lo <= k / n <= hi <= 1.0
        assert lo < hi
        assert lo < 1.0
        assert hi > 0.0
    assert wilson_interval(3, 3)[0] < 1.0  # type: ignore[index]


def test_count_intervals_are_wilson_of_the_right_counts() -> None:
    tp, fp, n_pos, n_neg = 40, 25, 60, 900
    regular, calibrated = count_intervals(tp, fp, n_pos, n_neg, pi0=[0.5, 0.01])
    assert regular["precision"] == wilson_interval(tp, tp + fp)
    assert regular["recall"] == wilson_interval(tp, n_pos)
    assert regular["fpr"] == wilson_interval(fp, n_neg)
    # F1 = 2J/(1 + J) with J = TP/(TP + FP + FN), a proportion of TP + FP + FN rows.
    fn = n_pos - tp
    j_lo, j_hi = wilson_interval(tp, tp + fp + fn)  # type: ignore[misc]
    assert regular["f1"] == pytest.approx([2 * j_lo / (1 + j_lo), 2 * j_hi / (1 + j_hi)])
    point = threshold_metrics(tp, fp, n_pos, n_neg, pi0=[0.5, 0.01])
    for name in ("precision", "recall", "fpr", "f1"):
        lo, hi = regular[name]  # type: ignore[misc]
        assert lo < float(point.regular[name]) < hi, name
    for p in (0.5, 0.01):
        for name in ("precision", "f1"):
            lo, hi = calibrated[p][name]  # type: ignore[misc]
            assert lo < float(point.calibrated[p][name]) < hi, (p, name)


def test_calibrated_intervals_reduce_to_tpr_when_fpr_is_known() -> None:
    """With a practically exact FPR (10^12 negatives), MOVER's FPR term vanishes and the
    calibrated precision interval is the metric at the ends of TPR's Wilson interval."""
    tp, n_pos, fp, n_neg, pi0 = 30, 50, 10**11, 10**12, 0.2
    _, calibrated = count_intervals(tp, fp, n_pos, n_neg, pi0=[pi0])
    t_lo, t_hi = wilson_interval(tp, n_pos)  # type: ignore[misc]
    f = fp / n_neg

    def precision(t: float) -> float:
        return pi0 * t / (pi0 * t + (1 - pi0) * f)

    def f1(t: float) -> float:
        return 2 * t / (1 + t + (1 - pi0) / pi0 * f)

    assert calibrated[pi0]["precision"] == pytest.approx([precision(t_lo), precision(t_hi)])
    assert calibrated[pi0]["f1"] == pytest.approx([f1(t_lo), f1(t_hi)])


def test_calibrated_intervals_on_the_bounds() -> None:
    """FP = 0: calibrated precision 1, its interval [box corner < 1, 1]; TP = 0: precision
    and F1 0, intervals [0, u] with u > 0."""
    _, calibrated = count_intervals(3, 0, 3, 50, pi0=[0.5])
    t_lo = wilson_interval(3, 3)[0]  # type: ignore[index]
    f_hi = wilson_interval(0, 50)[1]  # type: ignore[index]
    assert calibrated[0.5]["precision"] == pytest.approx([t_lo / (t_lo + f_hi), 1.0])
    assert calibrated[0.5]["f1"][0] < 1.0  # type: ignore[index]
    assert calibrated[0.5]["f1"][1] == 1.0  # type: ignore[index]
    regular, calibrated = count_intervals(0, 4, 3, 50, pi0=[0.5])
    for interval in (regular["precision"], regular["f1"], *calibrated[0.5].values()):
        assert interval is not None
        assert interval[0] == 0.0 < interval[1]


def test_t_quantile_matches_scipy() -> None:
    z = stats.norm.ppf(0.975)
    for df in (3, 5, 10, 19, 60, 1000):
        assert t_quantile(z, df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-3)
    assert t_quantile(z, None) == z
    assert t_quantile(z, math.inf) == z


def test_roc_auc_delong_is_the_placements_variance_and_welch_df() -> None:
    rng = np.random.default_rng(8)
    scores = np.round(rng.normal(size=300), 1)
    labels = (rng.random(300) < 0.2).astype(np.int8)
    scores[labels == 1] += 1.0
    pos, neg = scores[labels == 1], scores[labels == 0]
    pos_placement = np.array([(np.sum(neg < s) + 0.5 * np.sum(neg == s)) / neg.size for s in pos])
    neg_placement = np.array([(np.sum(pos > s) + 0.5 * np.sum(pos == s)) / pos.size for s in neg])
    s1 = pos_placement.var(ddof=1) / pos.size
    s0 = neg_placement.var(ddof=1) / neg.size
    expected = (s1 + s0) ** 2 / (s1**2 / (pos.size - 1) + s0**2 / (neg.size - 1))
    delong = roc_auc_delong(rank(scores, labels))
    assert delong is not None
    assert delong[0] == pytest.approx(s1 + s0, rel=1e-9)
    assert delong[1] == pytest.approx(expected, rel=1e-9)
    separated = np.r_[np.ones(5), np.zeros(20)].astype(np.int8)
    assert roc_auc_delong(rank(np.r_[np.arange(5) + 30.0, np.arange(20.0)], separated)) is None


def test_roc_auc_interval_is_delong_on_the_logit_scale_with_welch_t() -> None:
    """Off the bounds, ROC AUC's interval is logit(AUC) ± t·√V/(AUC(1 - AUC)), V DeLong's
    variance and t Student's at its Welch degrees of freedom (no bootstrap spread or bias
    correction), whatever the seed; 20 positives and 80 negatives, where the bootstrap's
    spread is wider; widened to hold the AUC with the unseen rows added (here the worse set's)."""
    rng = np.random.default_rng(4)
    labels = np.r_[np.ones(20), np.zeros(80)].astype(np.int8)
    scores = np.where(labels == 1, rng.beta(4.0, 2.5, 100), rng.beta(2.0, 4.0, 100))
    prepared = prepare(scores, labels, score_kind="score")
    auc = roc_auc_score(labels, scores)
    delong = roc_auc_delong(prepared.ranking)
    assert delong is not None
    half = t_quantile(stats.norm.ppf(0.975), delong[1]) * math.sqrt(delong[0]) / (auc * (1 - auc))
    logit = math.log(auc / (1 - auc))
    expected = [1 / (1 + math.exp(-(logit - half))), 1 / (1 + math.exp(-(logit + half)))]
    u = UNSEEN_ROWS
    worse = roc_auc_score(
        np.r_[labels, np.ones(u), np.zeros(u)], np.r_[scores, -np.ones(u), 2 * np.ones(u)]
    )
    better = roc_auc_score(
        np.r_[labels, np.ones(u), np.zeros(u)], np.r_[scores, 2 * np.ones(u), -np.ones(u)]
    )
    assert worse < expected[0]
    assert better < expected[1]
    expected[0] = worse
    for seed in (0, 1):
        out = bootstrap_intervals(prepared, threshold=0.5, pi0=[], seed=seed)
        assert out["regular"]["roc_auc"] == pytest.approx(expected, abs=1e-12)


def small_sets() -> list[tuple[str, FloatArray, Int8Array]]:
    """Sets with 0, 1, 2, 3 positives (among 60 negatives) and with perfect separation."""
    rng = np.random.default_rng(12)
    neg = rng.random(60) * 0.8
    out = []
    for k in range(4):
        pos = 0.3 + 0.6 * rng.random(k)
        out.append((f"{k} positives", np.r_[pos, neg], np.r_[np.ones(k), np.zeros(60)]))
    out.append(("separated", np.r_[0.85 + 0.02 * np.arange(5), neg], np.r_[np.ones(5), neg * 0]))
    return [(name, s, y.astype(np.int8)) for name, s, y in out]


@pytest.mark.parametrize(("name", "scores", "labels"), small_sets(), ids=lambda x: str(x)[:14])
def test_small_counts_give_a_proper_interval_or_none(
    name: str, scores: FloatArray, labels: Int8Array
) -> None:
    """Every interval of a set with few events is None or has width and holds its point."""
    result = evaluate(scores, labels, threshold=0.5, pi0=[0.5], intervals=True, seed=3)
    pairs = [
        (metric, result["regular"][metric], interval)
        for metric, interval in result["intervals"]["regular"].items()
    ]
    pairs += [
        (f"{metric}@0.5", result["calibrated"]["0.5"][metric], interval)
        for metric, interval in result["intervals"]["calibrated"]["0.5"].items()
    ]
    for metric, point, interval in pairs:
        if interval is None:
            continue
        lo, hi = interval
        assert lo < hi, (name, metric)
        assert lo <= point <= hi, (name, metric)


def test_perfect_separation_with_five_positives() -> None:
    """Five positives above 20 negatives: the curve metrics and precision, recall and F1 at τ
    are 1, and their intervals reach below 1; the maxima and AUPRG publish none."""
    scores = np.r_[0.9 + 0.01 * np.arange(5), 0.02 * np.arange(20)]
    labels = np.r_[np.ones(5), np.zeros(20)].astype(np.int8)
    result = evaluate(scores, labels, threshold=0.5, pi0=[0.5], intervals=True, seed=0)
    intervals = result["intervals"]
    ones = [
        intervals["regular"][name]
        for name in ("roc_auc", "average_precision", "precision", "recall", "f1")
    ]
    ones += [intervals["calibrated"]["0.5"][name] for name in ("average_precision", "precision")]
    for interval in ones:
        assert interval is not None
        assert interval[0] < 0.9
        assert interval[1] == 1.0
    for name in NO_INTERVAL:
        assert intervals["regular"][name] is None


def test_ap_interval_rule() -> None:
    """AP intervals from prior 0.1 up (calibrated at π0 = 0.05 they covered 0.887-0.92 on
    tied and three-level scores), and only while each negative weighs at most twice (odds of
    the set's prior at most twice the odds of p)."""
    assert MIN_AP_PRIOR == 0.1
    assert ap_interval_published(0.1, 0.1)
    assert not ap_interval_published(0.05, 0.05)
    assert not ap_interval_published(0.05, 0.002)
    assert not ap_interval_published(0.03, 0.03)
    assert ap_interval_published(0.5, 0.01)
    assert ap_interval_published(0.1, 0.15)
    assert not ap_interval_published(0.1, 0.2)  # odds 0.25 > 2 · 0.111
    assert not ap_interval_published(0.05, 0.2)
    assert not ap_interval_published(math.nan, 0.1)
    assert not ap_interval_published(0.5, 0.0)


@settings(max_examples=300, deadline=None)
@given(
    n_pos=st.integers(0, 12),
    n_neg=st.integers(0, 12),
    data=st.data(),
    pi0=st.sampled_from([0.01, 0.3, 0.5, 0.9]),
)
def test_count_intervals_hold_their_point_and_have_width(
    n_pos: int, n_neg: int, data: st.DataObject, pi0: float
) -> None:
    tp = data.draw(st.integers(0, n_pos))
    fp = data.draw(st.integers(0, n_neg))
    regular, calibrated = count_intervals(tp, fp, n_pos, n_neg, pi0=[pi0])
    point = threshold_metrics(tp, fp, n_pos, n_neg, pi0=[pi0])
    pairs = [(point.regular[name], regular[name]) for name in regular]
    pairs += [(point.calibrated[pi0][name], calibrated[pi0][name]) for name in calibrated[pi0]]
    for value, interval in pairs:
        if not math.isfinite(float(value)):
            assert interval is None
            continue
        assert interval is not None
        lo, hi = interval
        assert 0.0 <= lo <= float(value) <= hi <= 1.0
        assert lo < hi


def test_unseen_row_sets_are_the_set_with_rows_added_beyond_the_extremes() -> None:
    """Worse: UNSEEN_ROWS positives below every row and as many negatives above every row;
    better: the reverse. Their ROC AUC and AP are scikit-learn's on those rows."""
    rng = np.random.default_rng(5)
    scores = np.round(rng.random(80), 1)
    labels = (rng.random(80) < 0.3).astype(np.int8)
    ranking = rank(scores, labels)
    sets = unseen_row_sets(ranking)
    curves = curve_metrics(
        unseen_thresholds(ranking.thresholds),
        sets.pos,
        sets.neg_tied,
        sets.neg_above,
        sets.neg_below,
        pi0=[],
    )
    u = UNSEEN_ROWS
    added = np.r_[np.ones(u), np.zeros(u)].astype(np.int8)
    worse = np.r_[scores, np.full(u, -1.0), np.full(u, 2.0)]
    better = np.r_[scores, np.full(u, 2.0), np.full(u, -1.0)]
    for index, rows in enumerate((worse, better)):
        y = np.r_[labels, added]
        assert curves.regular["roc_auc"][index] == pytest.approx(roc_auc_score(y, rows))
        assert curves.regular["average_precision"][index] == pytest.approx(
            average_precision_score(y, rows)
        )
    point = roc_auc_score(labels, scores)
    assert curves.regular["roc_auc"][0] < point < curves.regular["roc_auc"][1]


def test_curve_and_mean_intervals_hold_the_unseen_rows() -> None:
    """A set whose positives all score above its negatives (a sample that drew none of a rare
    component): ROC AUC's and AP's intervals reach the values with UNSEEN_ROWS rows of each
    class added beyond the other class's extreme, and each mean's interval the mean with them
    (brier_neg: UNSEEN_ROWS negatives at the highest score)."""
    rng = np.random.default_rng(9)
    labels = np.r_[np.ones(20), np.zeros(80)].astype(np.int8)
    scores = np.r_[rng.uniform(0.8, 0.99, 20), rng.uniform(0.0, 0.1, 80)]
    prepared = prepare(scores, labels, score_kind="probability")
    out = bootstrap_intervals(prepared, threshold=0.5, pi0=[], seed=1, score_kind="probability")[
        "regular"
    ]
    u = UNSEEN_ROWS
    y = np.r_[labels, np.ones(u), np.zeros(u)].astype(np.int8)
    worse = np.r_[scores, np.full(u, -1.0), np.full(u, 2.0)]
    assert out["roc_auc"][0] <= roc_auc_score(y, worse) + 1e-12
    assert out["average_precision"][0] <= average_precision_score(y, worse) + 1e-12
    neg = scores[labels == 0]
    highest = scores.max()
    assert out["brier_neg"][1] >= (np.sum(neg**2) + u * highest**2) / (neg.size + u) - 1e-12
    lowest = scores.min()
    pos = scores[labels == 1]
    assert (
        out["brier_pos"][1]
        >= (np.sum((1 - pos) ** 2) + u * (1 - lowest) ** 2) / (pos.size + u) - 1e-12
    )
    abc_worse = (pos.sum() + u * lowest) / (pos.size + u) - (neg.sum() + u * highest) / (
        neg.size + u
    )
    assert out["ks_abc"][0] <= abc_worse + 1e-12
    v = UNSEEN_LOSS_ROWS
    low, high = np.clip([lowest, highest], UNSEEN_LOSS_EPS, 1 - UNSEEN_LOSS_EPS)
    loss = -np.sum(np.log(pos)) - np.sum(np.log1p(-neg)) - v * (np.log(low) + np.log1p(-high))
    assert out["log_loss"][1] >= loss / (scores.size + 2 * v) - 1e-12
