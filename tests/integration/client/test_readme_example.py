"""The README's Python example ("Sending from Python") runs as written against a real API and
prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.integration.client.servers import Server

REPO = Path(__file__).resolve().parents[3]
DOCUMENTED = "http://127.0.0.1:8000"


def test_the_readme_python_example(server: Server) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Sending from Python\n") :]
    section = section[: section.index("\n## ", 1)]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    assert DOCUMENTED in block
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "client"), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", block.replace(DOCUMENTED, server.url)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown
    stored = server.stored()
    assert stored == {"tx-10": (0.91, 1), "tx-11": (0.15, 0)}
