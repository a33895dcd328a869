"""Every sub-command that reads the settings refuses a bad configuration the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["serve", "api", "scheduler", "migrate"])
def test_bad_setting_exits_2_naming_the_setting(command: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CALMON_DATABASE_URL": f"sqlite:///{tmp_path / 'calmon.db'}",
        "CALMON_PORT": "70000",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "calmon.cli",
            command,
            *(["--once"] if command == "scheduler" else []),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"calmon {command}: invalid configuration: ")
    assert "CALMON_PORT" in done.stderr
    assert not (tmp_path / "calmon.db").exists()
