"""The engine's evaluation of a window against its reference
(:func:`calmon.metrics.window_evaluation.evaluate_window`): what a record is built from, keyed as
stored, the same for the same data."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from calmon.arrays import FloatArray
from calmon.catalogue import DECISION_METRIC
from calmon.metrics.decision import decide, decision_from_split, positives_shift
from calmon.metrics.evaluation import evaluate_ranked, set_sums
from calmon.metrics.label_free import label_shift_reference
from calmon.metrics.prepared import prepare
from calmon.metrics.window_evaluation import (
    ReferenceSet,
    TrailingSet,
    WindowConfig,
    evaluate_window,
    segment_seed,
    window_set,
)

CONFIG = WindowConfig(
    threshold=0.5,
    score_kind="probability",
    pi0=(0.1, 0.3),
    objective={"target_precision": 0.6},
)


def _data(seed: int, count: int, prior: float) -> tuple[FloatArray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random(count) < prior).astype(np.int8)
    scores = np.round(1.0 / (1.0 + np.exp(-(rng.normal(size=count) + 1.5 * labels - 1.0))), 3)
    labels[rng.random(count) < 0.1] = -1
    return scores, labels


def _reference(seed: int) -> ReferenceSet:
    scores, labels = _data(seed, 600, 0.3)
    prepared = prepare(scores[labels >= 0], labels[labels >= 0], score_kind="probability")
    sums = set_sums(
        prepared.pos_sorted, prepared.neg_sorted, threshold=0.5, score_kind="probability"
    )
    return ReferenceSet(
        ranking=prepared.ranking,
        sums=sums,
        evaluation=evaluate_ranked(
            prepared.ranking, sums, threshold=0.5, pi0=(), score_kind="probability"
        ),
    )


def test_a_window_against_its_reference_has_every_part_keyed_as_stored() -> None:
    scores, labels = _data(1, 500, 0.25)
    reference = _reference(2)
    window = window_set(scores, labels, name="*", score_kind="probability")
    evaluation = evaluate_window(window, reference, CONFIG)
    assert evaluation.n + evaluation.unlabelled == scores.size
    assert evaluation.unlabelled == int(np.count_nonzero(labels < 0))
    ref_key = repr(float(reference.evaluation["prior"]))
    assert list(evaluation.calibrated) == ["reference", "0.1", "0.3"]
    assert list(evaluation.intervals["calibrated"]) == ["reference", "0.1", "0.3"]
    assert evaluation.calibrated["reference"] is not None
    assert ref_key not in evaluation.calibrated
    assert evaluation.split is not None
    assert evaluation.estimated is not None
    assert evaluation.advice is not None
    assert evaluation.advice["objective"] == CONFIG.objective
    assert evaluation.reliability is not None
    every = np.sort(scores, kind="stable")
    prepared = window.prepared
    assert evaluation.seed == segment_seed("*", (prepared.pos_sorted, prepared.neg_sorted, every))
    again = evaluate_window(window, reference, CONFIG)
    assert again.regular == evaluation.regular
    assert again.split == evaluation.split
    with pytest.raises(dataclasses.FrozenInstanceError):
        evaluation.seed = 0  # type: ignore[misc]


def test_the_estimate_is_computed_only_where_the_labels_do_not_measure_the_ratio() -> None:
    """Where a window's labels measure its class ratio (90% labelled, 30 rows of each class)
    nothing reads the label-free estimate (the advice and the recalibration map take the
    measured ratio; the web view and the estimated-shift alert speak only before half the
    window is labelled): it is not computed. Below that share, or with too few rows of a class,
    it is, as before."""
    scores, labels = _data(1, 500, 0.25)
    reference = _reference(2)
    every_labelled = np.where(labels < 0, (scores > 0.6).astype(np.int8), labels)
    full = evaluate_window(
        window_set(scores, every_labelled, name="*", score_kind="probability"), reference, CONFIG
    )
    assert full.unlabelled == 0
    assert full.estimated is None
    assert reference._levels == []  # the isotonic levels were never built
    assert full.advice is not None
    assert full.advice["prior_source"] == "measured"
    mostly = every_labelled.copy()
    mostly[:40] = -1  # 92% labelled
    assert (
        evaluate_window(
            window_set(scores, mostly, name="*", score_kind="probability"), reference, CONFIG
        ).estimated
        is None
    )
    mostly[:60] = -1  # 88% labelled
    partly = evaluate_window(
        window_set(scores, mostly, name="*", score_kind="probability"), reference, CONFIG
    )
    assert partly.estimated is not None
    rare = np.zeros_like(every_labelled)
    rare[np.argsort(scores)[-20:]] = 1  # fully labelled, 20 positives: the ratio is not measured
    sparse = evaluate_window(
        window_set(scores, rare, name="*", score_kind="probability"), reference, CONFIG
    )
    assert sparse.unlabelled == 0
    assert sparse.estimated is not None
    assert sparse.estimated["n"] == scores.size


def test_without_a_usable_reference_there_is_no_split_and_no_reference_calibration() -> None:
    scores, labels = _data(3, 200, 0.3)
    window = window_set(scores, labels, name="a", score_kind="score")
    evaluation = evaluate_window(
        window, None, dataclasses.replace(CONFIG, score_kind="score", objective=None)
    )
    assert evaluation.split is None
    assert evaluation.estimated is None
    assert evaluation.advice is None
    assert evaluation.calibrated["reference"] is None
    assert evaluation.reliability is None


def test_a_window_alone_decides_from_its_own_split() -> None:
    scores, labels = _data(4, 500, 0.25)
    reference = _reference(5)
    window = window_set(scores, labels, name="*", score_kind="probability")
    evaluation = evaluate_window(window, reference, CONFIG)
    assert evaluation.split is not None
    prepared = window.prepared
    expected = decision_from_split(
        n=evaluation.n,
        n_pos=evaluation.n_pos,
        reference_n=reference.n,
        reference_n_pos=reference.ranking.n_pos,
        parts=evaluation.split[DECISION_METRIC],
        shift=positives_shift(prepared.ranking, reference.ranking, (prepared.neg_sorted,)),
        reference_value=reference.evaluation["regular"][DECISION_METRIC],
    )
    assert evaluation.decision == expected


def test_a_pooled_decision_is_the_decision_of_the_concatenated_set() -> None:
    """Pooling trailing windows' sorted classes with the window's equals deciding on all
    their predictions at once, against the trailing set's reference."""
    reference = _reference(6)
    parts = [_data(seed, 300, 0.2) for seed in (7, 8, 9)]
    window = window_set(*parts[0], name="*", score_kind="probability")
    trailing_sets = [
        prepare(s[lab >= 0], lab[lab >= 0], score_kind="probability") for s, lab in parts[1:]
    ]
    trailing = TrailingSet(
        positives=[p.pos_sorted for p in trailing_sets],
        negatives=[p.neg_sorted for p in trailing_sets],
        reference=reference,
    )
    evaluation = evaluate_window(window, reference, CONFIG, trailing)
    scores = np.concatenate([s[lab >= 0] for s, lab in parts])
    labels = np.concatenate([lab[lab >= 0] for _, lab in parts])
    pooled = prepare(scores, labels, score_kind="probability")
    expected = decide(
        pooled.ranking,
        set_sums(pooled.pos_sorted, pooled.neg_sorted, threshold=0.5, score_kind="probability"),
        reference.ranking,
        reference.sums,
        threshold=0.5,
        score_kind="probability",
        seed=evaluation.seed,
        negatives=(pooled.neg_sorted,),
    )
    assert evaluation.decision == expected
    assert evaluation.decision["n_pos"] == pooled.ranking.n_pos


def test_a_reference_builds_its_isotonic_levels_once_on_first_use() -> None:
    reference = _reference(2)
    levels = reference.label_shift
    expected = label_shift_reference(reference.ranking)
    assert levels is not None
    assert expected is not None
    np.testing.assert_array_equal(levels.group_level, expected.group_level)
    np.testing.assert_array_equal(levels.pos, expected.pos)
    assert reference.label_shift is levels
    scores, _ = _data(3, 200, 0.3)
    prepared = prepare(scores, np.zeros(scores.size, dtype=np.int8), score_kind="probability")
    sums = set_sums(
        prepared.pos_sorted, prepared.neg_sorted, threshold=0.5, score_kind="probability"
    )
    negatives_only = ReferenceSet(
        ranking=prepared.ranking,
        sums=sums,
        evaluation=evaluate_ranked(
            prepared.ranking, sums, threshold=0.5, pi0=(), score_kind="probability"
        ),
    )
    assert negatives_only.label_shift is None


def test_segment_seed_hashes_the_arrays_float64_bytes() -> None:
    """The seed is the blake2b digest of the name, then each array's size and float64 bytes,
    whatever the array's layout (a strided view gives the seed of its contiguous copy): stored
    records' intervals depend on it."""
    values = np.random.default_rng(4).random(1001)
    digest = hashlib.blake2b(b"a", digest_size=8)
    for array in (values[::2], values[:7]):
        digest.update(array.size.to_bytes(8, "little"))
        digest.update(np.array(array, dtype=np.float64).tobytes())
    expected = int.from_bytes(digest.digest(), "little") >> 1
    assert segment_seed("a", (values[::2], values[:7])) == expected
    assert segment_seed("a", (values,)) != segment_seed("b", (values,))
