"""The ``calmon`` command line: one sub-command per module of :mod:`calmon.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from calmon import __version__

DESCRIPTION = (
    "calmon monitors binary classifiers: regular and prior-calibrated metrics per time window,"
    " with each change split into a prior part and a likelihood part. Settings are CALMON_*"
    " environment variables (docs/reference/configuration.md); 'calmon COMMAND --help'"
    " describes each command."
)

#: sub-command name -> (module under ``calmon.commands``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "API and scheduler in one process (SQLite default, zero set-up)"),
    "api": ("api", "the HTTP API under uvicorn (production)"),
    "scheduler": ("scheduler", "the window scheduler (production)"),
    "migrate": ("migrate", "upgrade the database of CALMON_DATABASE_URL to the latest schema"),
    "retention": ("retention", "show or change the retention period every process uses"),
    "evaluate": ("evaluate", "compute every metric of a CSV file offline"),
    "simulate": ("simulate", "send a synthetic stream with known drifts to a running server"),
    "windows": ("windows", "show a model's stored windows as a table, from a running server"),
}


def build_parser() -> argparse.ArgumentParser:
    """Build the parser; each command module adds its own options via ``configure``."""
    parser = argparse.ArgumentParser(prog="calmon", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"calmon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(f"calmon.commands.{module_name}")
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``calmon`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    code: int = args._run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
