"""RequestBus against a real redis-server that goes away and comes back: the bus subscribes
again by itself (a restart or a Sentinel failover must not leave a gateway process deaf to
cancels and attaches for the rest of its life)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from server_host.ports import free_ports
from serving.request_bus import BusMessage, RequestBus
from stack.redis_server import RedisServer


async def _heard(bus: RequestBus, heard: list[str], scoped_id: str, deadline_s: float) -> bool:
    """Publish `scoped_id` until the bus hears it or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with contextlib.suppress(aioredis.ConnectionError, OSError):  # Redis still away
            await bus.publish(BusMessage.CANCEL, scoped_id)
        if scoped_id in heard:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_the_bus_subscribes_again_after_redis_restarts(tmp_path: Path) -> None:
    (port,) = free_ports(1)

    def server() -> RedisServer:
        return RedisServer(port, tmp_path / "data", tmp_path / "redis.log", secrets_dir=tmp_path / "secrets")

    first = server()
    first.start()
    # No retries inside redis-py: the outage reaches the bus at once, as a long one would.
    client = aioredis.Redis.from_url(first.url, retry=Retry(NoBackoff(), 0))
    heard: list[str] = []

    async def handler(message: BusMessage, scoped_id: str) -> None:
        heard.append(scoped_id)

    bus = RequestBus(client)
    await bus.start(handler)
    second = server()
    try:
        assert await _heard(bus, heard, "team/before", 10)
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(second.start)
        assert await _heard(bus, heard, "team/after", 30), "the bus never subscribed again"
    finally:
        await bus.close()
        await client.aclose()
        second.stop()
        first.stop()
