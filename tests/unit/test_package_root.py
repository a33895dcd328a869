"""The package root is the public Python API: ``calmon.evaluate_frame``, ``calmon.report`` and
``calmon.__version__``, typed for mypy, while ``import calmon`` itself loads neither the service
(FastAPI, SQLAlchemy) nor NumPy or pandas: the two functions load on first use."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import assert_type

import pytest

import calmon
import calmon.notebook
from calmon.offline.html_report import Report
from calmon.records import EvaluationRecord

REPO = Path(__file__).resolve().parents[2]
#: what ``import calmon`` must not load
HEAVY = ("fastapi", "sqlalchemy", "pandas", "numpy", "starlette", "pydantic", "calmon.notebook")


def test_import_calmon_loads_nothing_heavy() -> None:
    script = (
        "import json, sys; import calmon; loaded = [m for m in sys.argv[1:] if m in sys.modules];"
        "from calmon import evaluate_frame; print(json.dumps([loaded, 'numpy' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *HEAVY],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    loaded, numpy_after = json.loads(done.stdout)
    assert loaded == []
    assert numpy_after  # the lazy name did load its module


def test_the_root_re_exports_the_notebook_functions() -> None:
    assert calmon.evaluate_frame is calmon.notebook.evaluate_frame
    assert calmon.report is calmon.notebook.report
    assert calmon.__all__ == ["__version__", "evaluate_frame", "report"]
    assert {"evaluate_frame", "report", "__version__"} <= set(dir(calmon))
    with pytest.raises(AttributeError, match="module 'calmon' has no attribute 'evaluate'"):
        calmon.evaluate  # type: ignore[attr-defined]  # noqa: B018


def test_the_version_is_the_distributions() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert calmon.__version__ == version("calmon") == pyproject["project"]["version"]


def test_mypy_sees_the_types_of_the_root_names() -> None:
    """``assert_type`` is checked by mypy (this file is in its files): a root name typed Any
    would fail it there."""
    frame = {"score": [0.1, 0.4, 0.35, 0.8] * 25, "label": [0, 0, 1, 1] * 25}
    record = assert_type(calmon.evaluate_frame(frame), EvaluationRecord)
    assert (record["n"], record["n_pos"]) == (100, 50)
    made = assert_type(calmon.report(frame, frame), Report)
    assert made.html.startswith("<!doctype html>")
    assert_type(calmon.__version__, str)
