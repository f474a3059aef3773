"""Fencing by registration epoch, against a real redis-server: once a server id is registered
again (its first copy replaced while it was only unreachable), the first copy's late writes
(heartbeats, state changes, load reports, deregistration) are refused and change nothing, and
readers see only the replacement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from contracts.engine_metrics import EngineHealth
from fleet_state.epochs import Fenced, epoch_key
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
HEALTH = EngineHealth(T0, 80000, 61440, 3, 1, 4096, 2)
FIRST = ServerInfo("small-0", "small", "10.0.3.17", 8101, 8102, 8103, (), ServerState.READY, T0, T0, pid=11)
REPLACEMENT = replace(FIRST, host="10.0.3.99", pid=22)


@pytest.fixture()
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis_client = aioredis.Redis.from_url(redis_url)
    yield redis_client
    await redis_client.aclose()


async def test_a_replaced_servers_late_writes_are_refused(client: aioredis.Redis) -> None:
    registry, board = ServerRegistry(client, dead_after_s=2.0), LoadBoard(client)
    first = await registry.register(FIRST)
    assert first == 1
    assert await registry.heartbeat("small-0", T0 + 0.5, ServerState.READY, epoch=first)
    await board.publish("small", LoadReport("small-0", 1, T0, True, HEALTH), epoch=first)

    # The first copy's host is cut off; it is judged dead and replaced on another host.
    second = await registry.register(REPLACEMENT)
    assert second == 2
    await board.publish("small", LoadReport("small-0", 1, T0 + 3, True, None), epoch=second)

    # The first copy's link comes back: every write it makes is refused.
    with pytest.raises(Fenced):
        await registry.heartbeat("small-0", T0 + 4, ServerState.READY, epoch=first)
    with pytest.raises(Fenced):
        await registry.set_state("small-0", ServerState.DRAINING, T0 + 4, epoch=first)
    with pytest.raises(Fenced):
        await board.publish("small", LoadReport("small-0", 99, T0 + 4, True, HEALTH), epoch=first)
    with pytest.raises(Fenced):
        await registry.deregister("small-0", epoch=first)
    with pytest.raises(Fenced):  # nor can it register itself again under its old epoch
        await registry.register(replace(FIRST, epoch=first))

    # Readers (the gateways' directory, the supervisor) see the replacement only, untouched.
    (found,) = await registry.servers(now=T0 + 1)  # read at the replacement's own clock
    assert (found.host, found.pid, found.epoch, found.state) == ("10.0.3.99", 22, 2, ServerState.READY)
    assert found.heartbeat_at == T0  # the refused heartbeat did not keep anything alive
    report = (await board.read(["small"]))["small"]["small-0"]
    assert (report.seq, report.health) == (1, None)  # the replacement's report, not the old one's

    # The replacement's own writes go through.
    assert await registry.heartbeat("small-0", T0 + 4.2, ServerState.READY, epoch=second)
    await registry.deregister("small-0", epoch=second)
    assert await registry.servers(now=T0 + 5) == []


async def test_an_epoch_given_before_the_launch_is_the_registrations(client: aioredis.Redis) -> None:
    """A supervisor takes the epoch first (the process carries it), then registers with it;
    an epoch newer than the counter (one a Redis failover lost) is taken and moves it up."""
    registry = ServerRegistry(client, dead_after_s=2.0)
    epoch = await registry.next_epoch("small-0")
    assert await registry.register(replace(FIRST, epoch=epoch)) == epoch
    await client.set(epoch_key("small-0"), 0)  # lost in a failover
    assert await registry.register(replace(FIRST, epoch=epoch + 5)) == epoch + 5
    assert await client.get(epoch_key("small-0")) == str(epoch + 5).encode()
    with pytest.raises(Fenced):
        await registry.heartbeat("small-0", T0 + 1, epoch=epoch)


async def test_writes_without_an_epoch_are_not_fenced(client: aioredis.Redis) -> None:
    """An operator's drain request and callers that predate epochs write as before."""
    registry, board = ServerRegistry(client, dead_after_s=2.0), LoadBoard(client)
    await registry.register(FIRST)
    await registry.register(REPLACEMENT)
    assert await registry.request_drain("small-0", now=T0 + 1)
    assert await registry.heartbeat("small-0", T0 + 1)
    await board.publish("small", LoadReport("small-0", 3, T0, True, HEALTH))
    assert (await registry.get("small-0", now=T0 + 1)).state is ServerState.DRAINING  # type: ignore[union-attr]
