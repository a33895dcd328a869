"""π̂ at a rare prior on a held-out family (``bench/label_free_rare.py``, a smaller run): the
gradient-boosted tree's tied scores, windows of 20,000 rows at π = 0.005 (about 100
positives) against references of 20,000 rows at 0.1.

Claims (``docs/measurements/label-free.md``, "Rare priors"): π̂'s spread there reaches 0 in most
windows, and the record says so (``resolved`` false); the interval, centred on the estimating
equation's unclipped root, still holds the measured ratio in at least 90% of windows (the bench:
0.958 of 120; with the replicates clipped at 0 it was 0.850 on the same windows).
"""

from __future__ import annotations

import pytest

from studies.label_free import run_cell

pytestmark = pytest.mark.slow


def test_an_unresolved_estimate_says_so_and_its_interval_holds() -> None:
    cell = run_cell(
        "tree", reference_rows=20_000, prior=0.005, rise=None, references=12, windows=5, seed=2
    )
    assert cell.windows == 60
    assert cell.unresolved >= 0.8 * cell.windows
    assert cell.covered >= 0.9 * cell.windows
    assert cell.flagged <= 0.05 * cell.windows
