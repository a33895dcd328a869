"""The README's quick start: `calmon serve` with no configuration, in an empty directory."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from harness.processes import calmon_command, clean_environment, free_port, wait_until_up

#: an event time of the last hour, within the default retention period
RECENT = (datetime.now(UTC) - timedelta(hours=1)).isoformat()


def test_serve_with_no_configuration(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [*calmon_command(), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=clean_environment(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until_up(base, process)
        assert httpx.get(f"{base}/readyz").status_code == 200
        created = httpx.put(f"{base}/v1/models/quickstart", json={"pi0": [0.1]})
        assert created.status_code == 201
        body = {
            "predictions": [
                {
                    "id": f"p{i}",
                    "timestamp": RECENT,
                    "score": i / 10,
                    "label": i % 2,
                }
                for i in range(10)
            ]
        }
        posted = httpx.post(f"{base}/v1/models/quickstart/predictions", json=body)
        assert posted.json() == {"new": 10, "duplicates": 0, "pending_labels_applied": 0}
        assert httpx.get(f"{base}/docs").status_code == 200
        metrics = httpx.get(f"{base}/metrics").text
        assert 'calmon_predictions_ingested_total{model="quickstart"} 10.0' in metrics
    finally:
        process.terminate()
        code = process.wait(timeout=15)
        log.close()
    # uvicorn re-raises the SIGTERM it handled once shut down cleanly
    assert code in (0, -signal.SIGTERM), (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()
    assert (tmp_path / "calmon.db").is_file()
    lines = (tmp_path / "serve.log").read_text().splitlines()
    assert any('"route":"/v1/models/{model}/predictions"' in line for line in lines)
    records = [json.loads(line) for line in lines]
    assert not [r for r in records if r["logger"].startswith("alembic")]
    [migrated] = [r for r in records if r["logger"] == "calmon.db.migrate"]
    assert migrated["message"] == "database schema upgraded"
    assert migrated["from_revision"] == "empty"
    [ready] = [r for r in records if r["logger"] == "calmon.serve"]
    assert ready["message"] == f"open {base}/ui for the web view, {base}/docs for the API"
    assert records.index(ready) < records.index(migrated) + 8
