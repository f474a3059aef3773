"""The latency log: off unless asked for, and a failed write never reaches the request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.latency_log import LATENCY_LOG_ENV, LatencyLog


def test_off_unless_the_environment_names_a_file(tmp_path: Path) -> None:
    assert LatencyLog.from_environment({}) is None
    assert LatencyLog.from_environment({LATENCY_LOG_ENV: ""}) is None
    log = LatencyLog.from_environment({LATENCY_LOG_ENV: str(tmp_path / "l.jsonl")})
    assert log is not None
    log.write("gateway", "alpha/r", {"started": 1.0, "first_delta": None})
    log.close()
    line = json.loads((tmp_path / "l.jsonl").read_text())
    assert line == {"hop": "gateway", "request_id": "alpha/r", "started": 1.0, "first_delta": None}


def test_a_failed_write_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    log = LatencyLog(Path("/dev/full"))  # every write fails with ENOSPC, as on a full disk
    log.write("gateway", "alpha/r", {"started": 1.0})
    log.close()
    assert "could not write to the latency log" in caplog.text
