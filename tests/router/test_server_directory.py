"""ServerDirectory: the registry and the load board (a real redis-server) become routable loads
and pool capacity; a pool's configured server, which publishes nothing, is read over HTTP
(httpx's MockTransport answering as its metrics port would)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from config.settings import SwitchyardConfig, load_config
from contracts.engine_metrics import EngineHealth
from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from router.server_directory import MEMBERSHIP_GRACE_S, ServerDirectory

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 64}
  large: {weights_uri: models/large, max_context_tokens: 64}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
  large: {model_id: large, target_copies: 0, ports: {http: 9201, grpc: 9202, metrics: 9203}}
fleet: {dead_after_s: 2.0}
"""


def metrics_text(max_blocks: int, free_blocks: int) -> str:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    return "\n".join(
        [
            f"# TYPE {kv} gauge",
            f'{kv}{{kv_cache_block_type="max",model="cpu_engine",version="1"}} {max_blocks}',
            f'{kv}{{kv_cache_block_type="free",model="cpu_engine",version="1"}} {free_blocks}',
            f'{kv}{{kv_cache_block_type="tokens_per",model="cpu_engine",version="1"}} 16',
            "",
        ]
    )


@dataclass
class Pages:
    """What each metrics port answers: text, or an error status (None: connection refused)."""

    pages: dict[int, str | int | None] = field(default_factory=dict)

    def handle(self, request: httpx.Request) -> httpx.Response:
        page = self.pages.get(request.url.port or 0)
        if page is None:
            raise httpx.ConnectError("refused", request=request)
        if isinstance(page, int):
            return httpx.Response(page)
        return httpx.Response(200, text=page)


def server(server_id: str, port: int, state: ServerState = ServerState.READY) -> ServerInfo:
    return ServerInfo(
        server_id=server_id, pool_id="small", host="127.0.0.1", http_port=port - 2, grpc_port=port - 1,
        metrics_port=port, gpus=(), state=state, started_at=T0, heartbeat_at=T0,
    )  # fmt: skip


@dataclass
class World:
    directory: ServerDirectory
    registry: ServerRegistry
    board: LoadBoard
    pages: Pages
    clock: list[float]
    added: list[str]
    removed: list[str]
    changed_pools: list[str]
    seqs: dict[str, int] = field(default_factory=dict)

    async def publish(self, server_id: str, health: EngineHealth | None, sampled_at: float = T0) -> None:
        """What the server's own publisher writes: each report with the next seq."""
        seq = self.seqs[server_id] = self.seqs.get(server_id, 0) + 1
        await self.board.publish("small", LoadReport(server_id, seq, sampled_at, True, health))


def kv(max_blocks: int, free_blocks: int, active: int = 0, waiting: int = 0, bulk_blocks: int = 0) -> EngineHealth:
    return EngineHealth(T0, max_blocks * 16, free_blocks * 16, active, waiting, bulk_blocks * 16)


@pytest.fixture
def config(tmp_path: Path) -> SwitchyardConfig:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


@pytest.fixture
async def world(config: SwitchyardConfig, redis_url: str) -> AsyncIterator[World]:
    client = aioredis.Redis.from_url(redis_url)
    registry, board, pages = ServerRegistry(client, dead_after_s=2.0), LoadBoard(client), Pages()
    added: list[str] = []
    removed: list[str] = []
    clock = [T0]
    async with httpx.AsyncClient(transport=httpx.MockTransport(pages.handle)) as http:
        directory = ServerDirectory(
            config, registry, board, http, lambda info: added.append(info.server_id), removed.append,
            host=config.network.servers.advertised, clock=lambda: clock[0],
        )  # fmt: skip
        changed: list[str] = []
        directory.subscribe(changed.append)
        yield World(directory, registry, board, pages, clock, added, removed, changed)
    await client.aclose()


async def test_registered_servers_are_routed_by_what_they_publish(world: World) -> None:
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
    await world.publish("small-0", kv(100, 40, active=3, waiting=1, bulk_blocks=10), sampled_at=T0 - 0.05)
    await world.publish("small-1", kv(100, 100))
    await world.directory.refresh()
    loads = {load.server_id: load for load in world.directory.loads("small")}
    assert set(loads) == {"small-0", "small-1"} and world.added == ["small-0", "small-1"]
    busy = loads["small-0"]
    assert (busy.state, busy.capacity_tokens, busy.free_tokens, busy.active_requests, busy.waiting_requests) == (
        ServerState.READY,
        1600,
        640,
        3,
        1,
    )
    assert busy.bulk_tokens == 160
    assert world.directory.loads("large") == []
    assert world.directory.pool_of("small-1") == "small" and world.directory.pool_of("nope") is None
    # When the load was sampled, on the publisher's clock: routing counts its sends since then.
    assert world.directory.scraped_at == {"small-0": T0 - 0.05, "small-1": T0}


async def test_capacity_counts_ready_servers_and_what_draining_ones_still_hold(world: World) -> None:
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013, ServerState.DRAINING))
    await world.registry.register(server("small-2", 9023, ServerState.STARTING))
    for server_id, free in (("small-0", 40), ("small-1", 70), ("small-2", 0)):
        await world.publish(server_id, kv(100, free))
    await world.directory.refresh()
    capacity = world.directory.capacity("small")
    # ready: all 1,600 tokens; draining: only the 480 its replies still use; starting: nothing.
    assert capacity.capacity_tokens == 1600 + 480
    assert capacity.free_tokens == 640
    assert (capacity.ready_servers, capacity.servers) == (1, 3)
    assert world.changed_pools == ["small"]  # listeners hear of a change in capacity
    await world.directory.refresh()
    assert world.changed_pools == ["small"]  # ... and only of a change
    starting = next(load for load in world.directory.loads("small") if load.server_id == "small-2")
    assert starting.state is ServerState.STARTING and starting.capacity_tokens == 0


async def test_a_server_that_stops_publishing_or_cannot_read_its_metrics_is_not_routed_to(world: World) -> None:
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
    await world.registry.register(server("small-2", 9023))  # never published
    await world.publish("small-0", kv(100, 100))
    await world.publish("small-1", None)  # its metrics unreadable
    await world.directory.refresh()
    states = {load.server_id: load.state for load in world.directory.loads("small")}
    assert states == {"small-0": ServerState.READY, "small-1": ServerState.DEAD, "small-2": ServerState.DEAD}
    await later(world, T0 + 1.9)  # small-0's report unchanged, but not yet for dead_after_s
    assert next(iter(world.directory.loads("small"))).state is ServerState.READY
    await later(world, T0 + 2.1)  # its publisher is gone (the same seq for dead_after_s)
    assert {load.state for load in world.directory.loads("small")} == {ServerState.DEAD}
    assert world.directory.capacity("small").capacity_tokens == 0
    await world.publish("small-0", kv(100, 100))  # back
    await world.directory.refresh()
    assert world.directory.capacity("small").capacity_tokens == 1600
    assert world.removed == []  # the same servers all along: their clients are kept


async def later(world: World, now: float) -> None:
    """Move the clock on; the registry still hears from every server (its supervisor beats)."""
    world.clock[0] = now
    for info in await world.registry.servers(now=now):
        await world.registry.heartbeat(info.server_id, now)
    await world.directory.refresh()


async def test_servers_that_leave_or_move_are_removed_and_movers_added_again(world: World) -> None:
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
    await world.directory.refresh()
    await world.registry.deregister("small-0")
    await world.registry.register(server("small-1", 9033))  # restarted elsewhere under its id
    await world.directory.refresh()
    assert sorted(world.removed) == ["small-0", "small-1"]
    assert world.added == ["small-0", "small-1", "small-1"]
    assert [load.server_id for load in world.directory.loads("small")] == ["small-1"]


async def test_between_registry_reads_the_board_is_read_alone(world: World, redis_url: str) -> None:
    await world.registry.register(server("small-0", 9003))
    await world.publish("small-0", kv(100, 100))
    await world.directory.refresh()
    await world.registry.register(server("small-1", 9013))
    await world.publish("small-0", kv(100, 50))
    await world.directory.refresh(registry=False)
    assert [load.free_tokens for load in world.directory.loads("small")] == [800]  # new load...
    assert world.added == ["small-0"]  # ... but small-1 waits for the next registry read


async def test_a_dead_registered_server_is_left_out(world: World) -> None:
    await world.registry.register(server("small-0", 9003, ServerState.DEAD))
    await world.registry.register(server("small-1", 9013, ServerState.READY))
    await world.publish("small-1", kv(100, 100))
    await world.directory.refresh()
    assert [load.server_id for load in world.directory.loads("small")] == ["small-1"]


async def test_a_pool_with_no_registered_server_falls_back_to_its_configured_ports(world: World) -> None:
    world.pages.pages = {9103: metrics_text(50, 50)}
    await world.directory.refresh()
    (load,) = world.directory.loads("small")
    assert load.server_id == "small-configured" and load.capacity_tokens == 800
    assert world.directory.scraped_at == {"small-configured": T0}
    assert world.directory.loads("large") == []  # scaled to zero copies: nothing to call
    world.pages.pages = {9103: 503}
    await world.directory.refresh()
    assert [load.state for load in world.directory.loads("small")] == [ServerState.DEAD]
    await world.registry.register(server("small-0", 9003))
    await world.publish("small-0", kv(100, 100))
    await world.directory.refresh()
    assert [load.server_id for load in world.directory.loads("small")] == ["small-0"]
    assert world.removed == ["small-configured"]


async def test_a_drain_is_seen_at_once_not_at_the_next_registry_read(world: World, config: SwitchyardConfig) -> None:
    """The refresh loop wakes on the registry's change notice: a drain stops new work within
    one board period, though the registry is otherwise read every 30 s here."""
    live = ServerDirectory(
        config, world.registry, world.board, httpx.AsyncClient(), lambda info: None, lambda server_id: None,
        host=config.network.servers.advertised, refresh_s=0.05, registry_refresh_s=30.0,
    )  # fmt: skip
    now = time.time()
    await world.registry.register(replace(server("small-0", 9003), started_at=now, heartbeat_at=now))
    beating = asyncio.create_task(keep_publishing(world, "small-0"))
    live.start()
    try:
        await until(lambda: [load.state for load in live.loads("small")] == [ServerState.READY])
        await world.registry.request_drain("small-0")
        await until(lambda: [load.state for load in live.loads("small")] == [ServerState.DRAINING])
    finally:
        beating.cancel()
        await live.close()


async def keep_publishing(world: World, server_id: str) -> None:
    """A live server: its publisher reports, its supervisor beats."""
    while True:
        now = time.time()
        await world.publish(server_id, kv(100, 100), sampled_at=now)
        await world.registry.heartbeat(server_id, now)
        await asyncio.sleep(0.05)


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for a condition with a generous deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_a_server_whose_heartbeat_stops_keeps_its_connection_but_is_not_routed_to(
    config: SwitchyardConfig, redis_url: str
) -> None:
    """Membership outlives a stopped heartbeat (MEMBERSHIP_GRACE_S, what routing_setup gives
    the directory's registry); routing follows the load reports. A Redis failover refuses the
    servers' heartbeats for seconds: their connections, and the replies on them, must live."""
    client = aioredis.Redis.from_url(redis_url)
    registry = ServerRegistry(client, dead_after_s=MEMBERSHIP_GRACE_S)
    clock = [T0]
    removed: list[str] = []
    async with httpx.AsyncClient() as http:
        directory = ServerDirectory(
            config, registry, LoadBoard(client), http, lambda info: None, removed.append,
            host=config.network.servers.advertised, clock=lambda: clock[0],
        )  # fmt: skip
        await registry.register(server("small-0", 9003))
        await LoadBoard(client).publish("small", LoadReport("small-0", 1, T0, True, kv(100, 100)))
        await directory.refresh()
        assert [load.state for load in directory.loads("small")] == [ServerState.READY]
        clock[0] = T0 + 10  # neither heartbeat nor load report since
        await directory.refresh()
        assert [load.state for load in directory.loads("small")] == [ServerState.DEAD]  # not routed to...
        assert removed == []  # ... but its connection is kept
        clock[0] = T0 + MEMBERSHIP_GRACE_S + 1
        await directory.refresh()
        assert removed == ["small-0"]
    await client.aclose()
