"""ServerRegistry against a real redis-server: records, heartbeat ageing, one-way drains."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import redis.asyncio as aioredis

from fleet_state.registry import SERVERS_KEY, ServerInfo, ServerRegistry, server_key
from fleet_state.server_state import ServerState

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0


def info(server_id: str = "small-0", pool_id: str = "small", **changes: object) -> ServerInfo:
    base = ServerInfo(
        server_id=server_id,
        pool_id=pool_id,
        host="127.0.0.1",
        http_port=8101,
        grpc_port=8102,
        metrics_port=8103,
        gpus=(0, 3),
        state=ServerState.STARTING,
        started_at=T0,
        heartbeat_at=T0,
        pid=4242,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture()
async def registry(redis_url: str) -> AsyncIterator[ServerRegistry]:
    client = aioredis.Redis.from_url(redis_url)
    yield ServerRegistry(client, dead_after_s=2.0)
    await client.aclose()


async def test_a_registered_server_reads_back_whole(registry: ServerRegistry) -> None:
    await registry.register(info())
    (found,) = await registry.servers(now=T0 + 1)
    assert found == replace(info(), state_since=T0, epoch=1)
    assert found.grpc_url == "127.0.0.1:8102"
    assert found.metrics_url == "http://127.0.0.1:8103/metrics"
    assert found.health_url == "http://127.0.0.1:8101/v2/health/ready"
    assert await registry.get("small-0", now=T0 + 1) == found
    assert await registry.get("nope", now=T0) is None


async def test_servers_by_pool_sorted_by_id(registry: ServerRegistry) -> None:
    for server_id, pool_id in (("small-1", "small"), ("large-0", "large"), ("small-0", "small")):
        await registry.register(info(server_id, pool_id))
    assert [s.server_id for s in await registry.servers(now=T0)] == ["large-0", "small-0", "small-1"]
    assert [s.server_id for s in await registry.servers("small", now=T0)] == ["small-0", "small-1"]
    assert await registry.servers("medium", now=T0) == []


async def test_a_stale_heartbeat_reads_as_dead_whatever_the_stored_state(registry: ServerRegistry) -> None:
    await registry.register(info())
    assert await registry.set_state("small-0", ServerState.READY, T0 + 0.5)
    assert [s.state for s in await registry.servers(now=T0 + 2.0)] == [ServerState.READY]  # 2.0 s: not yet
    assert [s.state for s in await registry.servers(now=T0 + 2.01)] == [ServerState.DEAD]
    assert await registry.heartbeat("small-0", T0 + 2.5)
    (server,) = await registry.servers(now=T0 + 3.0)
    assert server.state is ServerState.READY and server.heartbeat_at == T0 + 2.5
    assert server.state_since == T0 + 0.5


async def test_a_drain_is_never_undone_except_by_death(registry: ServerRegistry) -> None:
    await registry.register(info())
    await registry.set_state("small-0", ServerState.READY, T0)
    assert await registry.request_drain("small-0", now=T0 + 1)
    assert not await registry.set_state("small-0", ServerState.READY, T0 + 2)  # a racing supervisor
    assert await registry.set_state("small-0", ServerState.DRAINING, T0 + 2)  # already there: fine
    (server,) = await registry.servers(now=T0 + 1)
    assert server.state is ServerState.DRAINING and server.state_since == T0 + 1
    assert await registry.set_state("small-0", ServerState.DEAD, T0 + 3)
    await registry.register(info())  # the relaunched process starts afresh
    assert [s.state for s in await registry.servers(now=T0)] == [ServerState.STARTING]


async def test_a_heartbeat_puts_back_a_state_redis_lost_but_never_undoes_a_drain(
    registry: ServerRegistry, redis_url: str
) -> None:
    await registry.register(info())
    assert await registry.set_state("small-0", ServerState.READY, T0)
    client = aioredis.Redis.from_url(redis_url)
    changes = await registry.changes()
    try:
        # What a failover can do: the READY write was acknowledged, then lost with the primary.
        await client.hset(server_key("small-0"), "state", "starting")
        assert await registry.heartbeat("small-0", T0 + 1, ServerState.READY)
        (server,) = await registry.servers(now=T0 + 1)
        assert server.state is ServerState.READY and server.state_since == T0 + 1
        notice = None
        for _ in range(20):  # the subscribe confirmation first, then the change
            notice = await changes.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if notice is not None:
                break
        assert notice is not None and notice["data"] == b"small-0"  # gateways re-read it at once
        assert await registry.heartbeat("small-0", T0 + 2, ServerState.READY)  # the same: left alone
        assert (await registry.servers(now=T0 + 2))[0].state_since == T0 + 1
        assert await registry.request_drain("small-0", now=T0 + 3)
        assert await registry.heartbeat("small-0", T0 + 4, ServerState.READY)  # alive, but draining
        assert (await registry.servers(now=T0 + 4))[0].state is ServerState.DRAINING
    finally:
        await changes.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()


async def test_a_heartbeat_after_a_silence_is_announced(registry: ServerRegistry) -> None:
    await registry.register(info())
    await registry.set_state("small-0", ServerState.READY, T0)
    changes = await registry.changes()
    try:
        assert await _announced(changes) == []  # the subscription's confirmation only
        assert await registry.heartbeat("small-0", T0 + 1.5, ServerState.READY)  # within dead_after_s
        assert await _announced(changes) == []
        assert await registry.heartbeat("small-0", T0 + 4.0, ServerState.READY)  # read as dead for 0.5 s
        assert await _announced(changes) == [b"small-0"]
    finally:
        await changes.aclose()  # type: ignore[no-untyped-call]


async def _announced(changes: Any) -> list[bytes]:
    """The ids announced so far: messages until a quiet 0.3 s."""
    found = []
    while (message := await changes.get_message(ignore_subscribe_messages=True, timeout=0.3)) is not None:
        found.append(message["data"])
    return found


async def test_unknown_servers_are_refused_not_created(registry: ServerRegistry, redis_url: str) -> None:
    assert not await registry.request_drain("ghost")
    assert not await registry.set_state("ghost", ServerState.READY, T0)
    assert not await registry.heartbeat("ghost", T0)
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert not await client.exists(server_key("ghost"))
    finally:
        await client.aclose()


async def test_deregister_removes_record_and_membership(registry: ServerRegistry, redis_url: str) -> None:
    await registry.register(info("small-0"))
    await registry.register(info("small-1"))
    await registry.deregister("small-0")
    assert [s.server_id for s in await registry.servers(now=T0)] == ["small-1"]
    assert not await registry.heartbeat("small-0", T0 + 1)  # a late heartbeat does not resurrect it
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.smembers(SERVERS_KEY) == {b"small-1"}
    finally:
        await client.aclose()


async def test_a_decoding_client_reads_the_same(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        registry = ServerRegistry(client)
        await registry.register(info(gpus=()))
        (server,) = await registry.servers(now=T0)
        assert server.gpus == () and server.pid == 4242
    finally:
        await client.aclose()


def test_dead_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="dead_after_s"):
        ServerRegistry(aioredis.Redis(), dead_after_s=0)
