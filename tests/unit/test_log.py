"""Structured logs (:mod:`calmon.log`): every line on stderr is one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_numpy_runtime_warnings_become_json_lines() -> None:
    script = textwrap.dedent(
        """
        import logging
        import numpy as np
        from calmon.log import configure_logging

        configure_logging("INFO")
        np.log(np.array([-1.0]))
        np.array([1.0]) / np.array([0.0])
        logging.getLogger("calmon").info("after")
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stderr.splitlines()
    records = [json.loads(line) for line in lines]
    warnings = [r for r in records if r["logger"] == "py.warnings"]
    assert [r["level"] for r in warnings] == ["WARNING", "WARNING"]
    assert "invalid value encountered in log" in warnings[0]["message"]
    assert "divide by zero" in warnings[1]["message"]
    assert records[-1]["message"] == "after"


def test_uncaught_exceptions_become_json_lines() -> None:
    script = textwrap.dedent(
        """
        import threading
        from calmon.log import configure_logging

        configure_logging("INFO")
        worker = threading.Thread(target=lambda: 1 / 0, name="worker")
        worker.start()
        worker.join()
        raise RuntimeError("main failed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [("calmon.uncaught", "ERROR")] * 2
    assert records[0]["in_thread"] == "worker"
    assert "ZeroDivisionError" in records[0]["exc"]
    assert "RuntimeError: main failed" in records[1]["exc"]


def test_alembic_steps_show_at_debug_only() -> None:
    script = textwrap.dedent(
        """
        import logging, sys
        from calmon.log import configure_logging

        configure_logging(sys.argv[1])
        logging.getLogger("alembic.runtime.migration").info("Running upgrade")
        logging.getLogger("alembic.runtime.migration").warning("odd")
        logging.getLogger("calmon.db.migrate").info("database schema upgraded")
        """
    )
    messages = {}
    for level in ("INFO", "DEBUG"):
        done = subprocess.run(
            [sys.executable, "-c", script, level],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        messages[level] = [json.loads(line)["message"] for line in done.stderr.splitlines()]
    assert messages["INFO"] == ["odd", "database schema upgraded"]
    assert messages["DEBUG"] == ["Running upgrade", "odd", "database schema upgraded"]
