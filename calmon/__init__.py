"""calmon: production monitoring of binary classifiers with prior-calibrated metrics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("calmon")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0"
