"""Name rules shared by the API, the storage and the offline tools (no heavy imports here)."""

from __future__ import annotations

from typing import Final

#: Model names: lower case, usable as a Prometheus label value and in URLs.
MODEL_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
#: the longest model name :data:`MODEL_NAME_PATTERN` allows
MODEL_NAME_MAX: Final = 63

#: Segment names such as ``country=FR``; ``*`` (all rows) is reserved and never a segment.
SEGMENT_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:=-]{0,63}$"

#: The segment name of every prediction (the whole population) in stored results and reports.
ALL_SEGMENTS: Final = "*"

#: A segment filter on stored results: a segment name or ``*``.
SEGMENT_OR_ALL_PATTERN: Final = r"^(\*|" + SEGMENT_PATTERN[1:-1] + r")$"
