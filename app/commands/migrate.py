"""`calmon migrate`."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `calmon migrate`."""


def run(args: argparse.Namespace) -> int:
    """Not built yet."""
    print("calmon migrate: not available in this version", file=sys.stderr)
    return 2
