"""NumPy array type aliases shared across calmon (one definition each; no other imports).

The lowest module of ``app``: the metric engine and everything else import these names from
here, so an alias means the same dtype everywhere.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

FloatArray: TypeAlias = npt.NDArray[np.float64]
"""Scores, probabilities, metric values."""

IntArray: TypeAlias = npt.NDArray[np.int64]
"""Counts (block counts, replicate weights, bin counts)."""

Int8Array: TypeAlias = npt.NDArray[np.int8]
"""Labels as stored: 1, 0, or a negative marker for unlabelled."""

BoolArray: TypeAlias = npt.NDArray[np.bool_]
"""Masks."""

LabelArray: TypeAlias = npt.NDArray[np.integer] | npt.NDArray[np.bool_]
"""Binary labels as given to the engine: any integer dtype (1/0) or booleans."""
