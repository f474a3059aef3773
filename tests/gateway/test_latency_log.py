"""The gateway's line in the latency log (docs/latency.md): written per request when
`SWITCHYARD_LATENCY_LOG` (GatewaySettings.latency_log) names a file, with its stamps in the
order they happen."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from contracts.latency_log import LATENCY_LOG_ENV
from gateway.settings import GatewaySettings
from quota.capacity import StaticCapacity

from .conftest import FakeBackend, build_app


async def test_a_request_leaves_one_gateway_line_with_ordered_stamps(
    settings: GatewaySettings,
    capacity: StaticCapacity,
    admin_key: str,
    backend: FakeBackend,
    team_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "latency.jsonl"
    monkeypatch.setenv(LATENCY_LOG_ENV, str(log))  # as a process reads it, with its other settings
    app = build_app(GatewaySettings(config=settings.config), backend, capacity)
    before = time.time()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {team_key}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as client:
            body = {"model": "small", "prompt": "hello", "max_tokens": 3, "request_id": "lat-1", "stream": True}
            response = await client.post("/v1/generate", json=body)
            assert response.status_code == 200
            deadline = time.monotonic() + 30
            while not (log.exists() and log.read_text()):  # the line is written as the request ends
                assert time.monotonic() < deadline, "no latency line was written"
                await asyncio.sleep(0.02)
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["hop"] == "gateway"
    assert line["request_id"] == "alpha/lat-1"  # the id the servers' lines carry
    stamps = [line[name] for name in ("started", "admitted", "first_delta", "finished")]
    assert before <= stamps[0] and stamps == sorted(stamps)
