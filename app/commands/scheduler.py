"""`calmon scheduler`."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon scheduler`."""


def run(args: argparse.Namespace) -> int:
    """Not built yet."""
    print("calmon scheduler: not available in this version", file=sys.stderr)
    return 2
