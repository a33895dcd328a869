"""Label-free estimates under a prior shift: calmon's against NannyML's CBPE (a script, not a test).

    PYTHONPATH=. <benchmark env>/bin/python bench/label_free.py [--windows 3] [--rows 20000]

NannyML (``nannyml`` 0.13 from PyPI) pulls in pandas, lightgbm, plotly and more, so it lives in
a separate benchmark environment, never in calmon's dependencies; calmon's estimator
(``calmon.metrics.label_free``) needs only NumPy, so the same interpreter runs both.

The streams: a reference of ``--reference`` rows at π_ref = 0.1 with labels; then, for each
π in 0.01, 0.02, 0.05, 0.1, 0.2, ``--windows`` windows of ``--rows`` rows drawn with the same
P(score | y) (a pure prior shift). Scores are a binormal model (separation 1.5) through a
logistic: probabilities that are not calibrated at any prior. Both estimators see the window's
scores only; the truth is each window's measured precision, F1 (at threshold 0.5) and ROC AUC
from its labels. Prints, per π and overall, the mean absolute error of each estimator.

CBPE assumes that the model's probabilities, once calibrated on the reference, stay
calibrated; under a prior shift they are not (P(y | score) moves with π), so its precision and
F1 follow the reference's prior. calmon's estimator re-estimates π first (EM on isotonic levels
of the reference) and adjusts the probabilities to it.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import numpy.typing as npt

from calmon.arrays import FloatArray
from calmon.metrics.evaluation import evaluate
from calmon.metrics.label_free import estimate_window, label_shift_reference
from calmon.metrics.ranking import rank

METRICS = ("precision", "f1", "roc_auc")
PRIORS = (0.01, 0.02, 0.05, 0.1, 0.2)
REFERENCE_PRIOR = 0.1
THRESHOLD = 0.5


def draw(rng: np.random.Generator, n: int, pi: float) -> tuple[FloatArray, npt.NDArray[np.int8]]:
    """``n`` rows at prior ``pi``: probabilities (n,) and labels (n,)."""
    y = rng.random(n) < pi
    s = np.where(y, rng.normal(1.5, 1.0, n), rng.normal(0.0, 1.0, n))
    return 1.0 / (1.0 + np.exp(-(s - 2.0))), y.astype(np.int8)


def cbpe_estimates(
    reference: tuple[FloatArray, npt.NDArray[np.int8]], windows: list[FloatArray]
) -> list[dict[str, float]]:
    """CBPE's estimated metrics of each window (one chunk per window)."""
    # no usage reporting over the network; one chunk per window is intended
    os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")
    warnings.filterwarnings("ignore", message="The resulting number of chunks is too low")
    import nannyml as nml
    import pandas as pd

    scores, labels = reference
    frame = pd.DataFrame(
        {"y_pred_proba": scores, "y_pred": (scores >= THRESHOLD).astype(int), "y_true": labels}
    )
    out = []
    for window in windows:
        estimator = nml.CBPE(
            y_pred_proba="y_pred_proba",
            y_pred="y_pred",
            y_true="y_true",
            problem_type="classification_binary",
            metrics=list(METRICS),
            chunk_size=window.size,
        )
        estimator.fit(frame)
        analysis = pd.DataFrame(
            {"y_pred_proba": window, "y_pred": (window >= THRESHOLD).astype(int)}
        )
        result = estimator.estimate(analysis).filter(period="analysis").to_df()
        out.append({name: float(result[(name, "value")].iloc[0]) for name in METRICS})
    return out


def main() -> None:
    """Run both estimators on the same streams and print their errors side by side."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reference", type=int, default=50_000, help="reference rows")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per window")
    parser.add_argument("--windows", type=int, default=3, help="windows per prior")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    reference = draw(rng, args.reference, REFERENCE_PRIOR)
    levels = label_shift_reference(rank(reference[0], reference[1]))
    streams = [(pi, *draw(rng, args.rows, pi)) for pi in PRIORS for _ in range(args.windows)]
    cbpe = cbpe_estimates(reference, [scores for _, scores, _ in streams])
    errors: dict[tuple[float, str, str], list[float]] = {}
    for (pi, scores, labels), theirs in zip(streams, cbpe, strict=True):
        truth = evaluate(scores, labels, threshold=THRESHOLD)["regular"]
        ours = estimate_window(levels, np.sort(scores), threshold=THRESHOLD, pi0=[], seed=0)
        assert ours is not None
        for name in METRICS:
            errors.setdefault((pi, name, "cbpe"), []).append(abs(theirs[name] - truth[name]))
            errors.setdefault((pi, name, "calmon"), []).append(
                abs(ours["regular"][name] - truth[name])
            )
    print(
        f"reference {args.reference:,} rows at pi = {REFERENCE_PRIOR}; {args.windows} windows of "
        f"{args.rows:,} rows per pi; mean absolute error of the estimated metric"
    )
    header = "  ".join(f"{name + ' CBPE':>14}  {name + ' calmon':>16}" for name in METRICS)
    print(f"{'pi':>5}  {header}")
    rows: list[float | None] = [*PRIORS, None]
    for prior in rows:
        cells = []
        for name in METRICS:
            pair = []
            for who in ("cbpe", "calmon"):
                values = [
                    v
                    for (p, n, w), vs in errors.items()
                    if n == name and w == who and (prior is None or p == prior)
                    for v in vs
                ]
                pair.append(float(np.mean(values)))
            cells.append(f"{pair[0]:14.4f}  {pair[1]:16.4f}")
        label = "all" if prior is None else f"{prior:g}"
        print(f"{label:>5}  {'  '.join(cells)}")


if __name__ == "__main__":
    main()
