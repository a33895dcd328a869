"""`calmon scheduler` whose every window transaction waits after writing everything, before
it commits, so that tests can overlap replicas or stop one in the middle of a window.

Run as ``python -m tests.paused_scheduler SECONDS [calmon scheduler options]``. The pause is
the scheduler's ``before_commit`` hook, which production leaves unset.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from calmon import cli
from calmon.scheduler import runner

#: the directory to put on ``PYTHONPATH`` so that ``-m tests.paused_scheduler`` is found
ROOT = str(Path(__file__).resolve().parents[1])


def command(seconds: float, *options: str) -> list[str]:
    """The command line of a scheduler process pausing ``seconds`` before each commit."""
    return [sys.executable, "-m", "tests.paused_scheduler", str(seconds), *options]


def main(argv: list[str]) -> int:
    """Run `calmon scheduler` with ``argv[1:]``, each window pausing ``argv[0]`` seconds."""
    seconds = float(argv[0])
    base = runner.WindowScheduler

    class PausedScheduler(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, before_commit=lambda: time.sleep(seconds), **kwargs)

    runner.WindowScheduler = PausedScheduler  # type: ignore[misc]
    return cli.main(["scheduler", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
