"""Usage recorded while Redis restarts is not lost: the write is retried until Redis is back
(the chaos run's restart-redis fault: replies that ended during the restart were served and
never billed, "usage not recorded in redis")."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis.asyncio
from prometheus_client import CollectorRegistry

from quota.usage import UsageMeter, UsageRecord
from quota.usage_counters import UsageCounters
from server_host.ports import free_ports
from serving.metering import Metering
from stack.redis_server import RedisServer


async def test_usage_that_ends_while_redis_restarts_is_recorded_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (port,) = free_ports(1)
    server = RedisServer(port, tmp_path / "data", tmp_path / "redis.log", secrets_dir=tmp_path / "secrets")
    server.start()
    client = redis.asyncio.Redis.from_url(server.url)
    metering = Metering(UsageMeter(client), UsageCounters(CollectorRegistry()), retry_s=60.0)
    try:
        await asyncio.to_thread(server.stop)
        caplog.set_level(logging.WARNING, logger="serving.metering")
        rec = UsageRecord(
            team_id="team-a", model_id="m", request_class="interactive", prompt_tokens=5, completion_tokens=7
        )
        recording = asyncio.create_task(metering.record(rec, at=datetime.now(UTC)))
        deadline = time.monotonic() + 30
        while "retrying" not in caplog.text:  # it found Redis down and waits
            assert time.monotonic() < deadline and not recording.done()
            await asyncio.sleep(0.02)
        await asyncio.to_thread(server.start)
        await asyncio.wait_for(recording, 60)
        now = datetime.now(UTC)
        rows = await metering.meter.query("team-a", now - timedelta(hours=1), now + timedelta(hours=1))
        assert [(r.completion_tokens, r.prompt_tokens, r.requests) for r in rows] == [(7, 5, 1)]
        assert "usage not recorded in redis" not in caplog.text
    finally:
        await client.aclose()
        server.stop()


async def test_usage_is_given_up_after_retry_s(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (port,) = free_ports(1)  # nothing listens there
    client = redis.asyncio.Redis(port=port)
    metering = Metering(UsageMeter(client), UsageCounters(CollectorRegistry()), retry_s=0.3)
    try:
        await metering.record(
            UsageRecord(team_id="team-a", model_id="m", request_class="interactive", completion_tokens=1),
            at=datetime.now(UTC),
        )
    finally:
        await client.aclose()
    assert "usage not recorded in redis" in caplog.text  # logged, not raised
