"""Write ``examples/story.csv``: ten days of a fraud model's scored, labelled predictions that
tell, one day per window, what calmon separates.

- days 1 to 3: the reference period (the first day is the report's reference) and two days
  like it;
- days 4 to 6: a prior shift: the share of fraud rises from 10% to 25%, and the model is the
  same (every class's scores follow the reference's distribution);
- days 7 to 10: the model gets worse: the class ratio is back at 10%, and the scores of fraud
  and of legitimate transactions overlap more.

Each row has a ``segment`` (``channel=web``, ``channel=app``, ``channel=store``). The scores
are probabilities: the logistic of a binormal score whose classes lie ``SEPARATION`` standard
deviations apart, calibrated at the reference's class ratio. Seeded, so the file is the same
on every run::

    python3 examples/make_story.py            # writes examples/story.csv
    python3 examples/make_story.py -o FILE    # elsewhere

Needs NumPy only.
"""

from __future__ import annotations

import argparse
import csv
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import numpy as np

SEED: Final = 20261101
START: Final = datetime(2026, 11, 1, tzinfo=UTC)
ROWS_PER_DAY: Final = 1_200
SEGMENTS: Final = ("channel=web", "channel=app", "channel=store")
SEGMENT_SHARES: Final = (0.5, 0.35, 0.15)
#: the reference's fraud share and its model's separation (standard deviations)
RATIO: Final = 0.10
SEPARATION: Final = 2.2
#: per day: (fraud share, separation of the classes' scores)
DAYS: Final = (
    (RATIO, SEPARATION),
    (RATIO, SEPARATION),
    (RATIO, SEPARATION),
    (0.25, SEPARATION),
    (0.25, SEPARATION),
    (0.25, SEPARATION),
    (RATIO, 1.2),
    (RATIO, 1.2),
    (RATIO, 1.2),
    (RATIO, 1.2),
)
DEFAULT_OUTPUT: Final = Path(__file__).resolve().parent / "story.csv"


def _probability(x: np.ndarray) -> np.ndarray:
    """The model: P(fraud | x) at the reference's ratio and separation, for a binormal score
    ``x`` (legitimate ~ N(0, 1), fraud ~ N(:data:`SEPARATION`, 1)). The same function every
    day; what changes is the data it scores."""
    prior_logit = math.log(RATIO / (1 - RATIO))
    return 1 / (1 + np.exp(-(prior_logit + SEPARATION * x - SEPARATION**2 / 2)))


def rows(seed: int = SEED) -> list[tuple[str, int, str, str]]:
    """The stream, oldest first: (score, label, timestamp, segment) per prediction."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, int, str, str]] = []
    for day, (ratio, separation) in enumerate(DAYS):
        offsets = np.sort(rng.uniform(0, 86_400, ROWS_PER_DAY)).astype(int)
        labels = (rng.random(ROWS_PER_DAY) < ratio).astype(int)
        x = rng.normal(0.0, 1.0, ROWS_PER_DAY) + labels * separation
        scores = _probability(x)
        segments = rng.choice(len(SEGMENTS), size=ROWS_PER_DAY, p=SEGMENT_SHARES)
        base = START + timedelta(days=day)
        for offset, segment, score, label in zip(
            offsets.tolist(), segments.tolist(), scores.tolist(), labels.tolist(), strict=True
        ):
            moment = base + timedelta(seconds=offset)
            out.append((f"{score:.4f}", label, f"{moment:%Y-%m-%dT%H:%M:%SZ}", SEGMENTS[segment]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    with args.output.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(("score", "label", "timestamp", "segment"))
        writer.writerows(rows(args.seed))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
