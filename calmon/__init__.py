"""calmon: production monitoring of binary classifiers with prior-calibrated metrics.

The public Python API is this package's root: :func:`evaluate_frame` (every metric of a data
frame, as a typed record) and :func:`report` (a window compared with a reference, as the web
view's page), both from :mod:`calmon.notebook`, and ``__version__``. ``import calmon`` stays
light: the two functions, which bring NumPy and the service's modules, load on first use.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from calmon.notebook import evaluate_frame, report

try:
    __version__ = version("calmon")
except PackageNotFoundError:  # pragma: no cover - a checkout on the path, not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "evaluate_frame", "report"]

#: the public names loaded on first use, and the module each comes from
_LAZY = {"evaluate_frame": "calmon.notebook", "report": "calmon.notebook"}

if not TYPE_CHECKING:  # mypy reads the imports above; a typo stays an error there

    def __getattr__(name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
