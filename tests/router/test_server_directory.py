"""ServerDirectory: the registry (a real redis-server) and each server's metrics (answered by
httpx's MockTransport, as a server's metrics port would) become routable loads and pool capacity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from config.settings import SwitchyardConfig, load_config
from router.registry import ServerInfo, ServerRegistry
from router.routing_policy import ServerState
from router.server_directory import ServerDirectory

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
CONFIG = """
models:
  small: {weights_uri: models/small, max_context_tokens: 64}
  large: {weights_uri: models/large, max_context_tokens: 64}
pools:
  small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}
  large: {model_id: large, target_copies: 0, ports: {http: 9201, grpc: 9202, metrics: 9203}}
"""


def metrics_text(max_blocks: int, free_blocks: int, active: int = 0, waiting: int = 0, bulk_blocks: int = 0) -> str:
    kv = "nv_trt_llm_kv_cache_block_metrics"
    requests = "nv_trt_llm_request_metrics"
    return "\n".join(
        [
            f"# TYPE {kv} gauge",
            f'{kv}{{kv_cache_block_type="max",model="cpu_engine",version="1"}} {max_blocks}',
            f'{kv}{{kv_cache_block_type="free",model="cpu_engine",version="1"}} {free_blocks}',
            f'{kv}{{kv_cache_block_type="tokens_per",model="cpu_engine",version="1"}} 16',
            f"# TYPE {requests} gauge",
            f'{requests}{{request_type="active",model="cpu_engine",version="1"}} {active}',
            f'{requests}{{request_type="waiting",model="cpu_engine",version="1"}} {waiting}',
            "# TYPE switchyard_engine_kv_blocks gauge",
            f'switchyard_engine_kv_blocks{{request_class="bulk",model="cpu_engine",version="1"}} {bulk_blocks}',
            "",
        ]
    )


@dataclass
class Servers:
    """What each metrics port answers: text, or an error status (None: connection refused)."""

    pages: dict[int, str | int | None] = field(default_factory=dict)

    def handle(self, request: httpx.Request) -> httpx.Response:
        page = self.pages.get(request.url.port or 0)
        if page is None:
            raise httpx.ConnectError("refused", request=request)
        if isinstance(page, int):
            return httpx.Response(page)
        return httpx.Response(200, text=page)


def server(
    server_id: str, metrics_port: int, state: ServerState = ServerState.READY, pool_id: str = "small"
) -> ServerInfo:
    return ServerInfo(
        server_id=server_id, pool_id="small", host="127.0.0.1", http_port=metrics_port - 2,
        grpc_port=metrics_port - 1, metrics_port=metrics_port, gpus=(), state=state,
        started_at=T0, heartbeat_at=T0,
    )  # fmt: skip


@dataclass
class World:
    directory: ServerDirectory
    registry: ServerRegistry
    servers: Servers
    added: list[str]
    removed: list[str]
    changed_pools: list[str]


@pytest.fixture
def config(tmp_path: Path) -> SwitchyardConfig:
    path = tmp_path / "switchyard.yaml"
    path.write_text(CONFIG)
    return load_config(path)


@pytest.fixture
async def world(config: SwitchyardConfig, redis_url: str) -> AsyncIterator[World]:
    client = aioredis.Redis.from_url(redis_url)
    registry = ServerRegistry(client, dead_after_s=2.0)
    servers = Servers()
    added: list[str] = []
    removed: list[str] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(servers.handle)) as http:
        directory = ServerDirectory(
            config, registry, http, lambda info: added.append(info.server_id), removed.append, clock=lambda: T0
        )
        changed: list[str] = []
        directory.subscribe(changed.append)
        yield World(directory, registry, servers, added, removed, changed)
    await client.aclose()


async def test_registered_servers_become_loads_from_their_metrics(world: World) -> None:
    world.servers.pages = {
        9003: metrics_text(100, 40, active=3, waiting=1, bulk_blocks=10),
        9013: metrics_text(100, 100),
    }
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
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
    assert world.directory.scraped_at == {"small-0": T0, "small-1": T0}


async def test_capacity_counts_ready_servers_and_what_draining_ones_still_hold(world: World) -> None:
    world.servers.pages = {9003: metrics_text(100, 40), 9013: metrics_text(100, 70), 9023: metrics_text(100, 0)}
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013, ServerState.DRAINING))
    await world.registry.register(server("small-2", 9023, ServerState.STARTING))
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
    assert starting.state is ServerState.STARTING and starting.capacity_tokens == 0  # never scraped


async def test_a_server_whose_metrics_cannot_be_read_is_not_routable_until_they_can(world: World) -> None:
    world.servers.pages = {9003: 503, 9013: None}
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
    await world.directory.refresh()
    assert {load.state for load in world.directory.loads("small")} == {ServerState.DEAD}
    assert world.directory.capacity("small").capacity_tokens == 0
    world.servers.pages = {9003: metrics_text(100, 100), 9013: metrics_text(100, 100)}
    await world.directory.refresh()
    assert {load.state for load in world.directory.loads("small")} == {ServerState.READY}
    assert world.removed == []  # the same servers: their clients are kept


async def test_servers_that_leave_or_move_are_removed_and_movers_added_again(world: World) -> None:
    world.servers.pages = {9003: metrics_text(100, 100), 9013: metrics_text(100, 100), 9033: metrics_text(100, 100)}
    await world.registry.register(server("small-0", 9003))
    await world.registry.register(server("small-1", 9013))
    await world.directory.refresh()
    await world.registry.deregister("small-0")
    await world.registry.register(server("small-1", 9033))  # restarted elsewhere under its id
    await world.directory.refresh()
    assert sorted(world.removed) == ["small-0", "small-1"]
    assert world.added == ["small-0", "small-1", "small-1"]
    assert [load.server_id for load in world.directory.loads("small")] == ["small-1"]
    assert "small-0" not in world.directory.scraped_at


async def test_a_dead_registered_server_is_left_out(world: World) -> None:
    world.servers.pages = {9003: metrics_text(100, 100)}
    await world.registry.register(server("small-0", 9003, ServerState.DEAD))
    await world.registry.register(server("small-1", 9013, ServerState.READY))
    world.servers.pages[9013] = metrics_text(100, 100)
    await world.directory.refresh()
    assert [load.server_id for load in world.directory.loads("small")] == ["small-1"]


async def test_a_pool_with_no_registered_server_falls_back_to_its_configured_ports(world: World) -> None:
    world.servers.pages = {9103: metrics_text(50, 50)}
    await world.directory.refresh()
    (load,) = world.directory.loads("small")
    assert load.server_id == "small-configured" and load.capacity_tokens == 800
    assert world.directory.loads("large") == []  # scaled to zero copies: nothing to call
    await world.registry.register(server("small-0", 9003))
    world.servers.pages[9003] = metrics_text(100, 100)
    await world.directory.refresh()
    assert [load.server_id for load in world.directory.loads("small")] == ["small-0"]
    assert world.removed == ["small-configured"]


async def test_the_directory_refreshes_on_a_registry_change_without_waiting(world: World) -> None:
    """A drain must stop new work within milliseconds: the refresh loop wakes on the registry's
    change notice, not on its next period."""
    world.servers.pages = {9003: metrics_text(100, 100)}
    slow = ServerDirectory(
        world.directory._config,
        world.registry,
        world.directory._http,
        lambda info: None,
        lambda server_id: None,
        refresh_s=30.0,
        clock=lambda: T0,
    )
    await world.registry.register(server("small-0", 9003))
    slow.start()
    try:
        await until(lambda: [load.state for load in slow.loads("small")] == [ServerState.READY])
        await world.registry.request_drain("small-0", now=T0)
        await until(lambda: [load.state for load in slow.loads("small")] == [ServerState.DRAINING])
    finally:
        await slow.close()


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for a condition with a generous deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)
