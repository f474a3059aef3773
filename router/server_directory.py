"""The fleet as one gateway process sees it:

    registry (Redis)   ──on each change, and every registry_refresh_s──▶ each pool's servers and
                         their states (starting, ready, draining, dead)
    load board (Redis) ──every fleet.load_publish_s while this worker routes, every second
                         while it does not──▶ each server's KV and requests, as the server
                         itself published them (fleet_state/load_board.py)
    streams            ──▶ a gRPC client per routable server (added and removed as they come and go)

No server is scraped from here: a gateway worker costs Redis one HGETALL per pool per refresh,
and each server is read once, by its own process, however many workers route by it. A server
whose report is missing, unreadable or no longer advancing is not routed to until it is again.

A pool with no registered server falls back to the server its `switchyard.yaml` ports name
(one started by hand with `switchyard triton`, which publishes nothing): its metrics are read
here, and it is taken as ready while they answer.

It is also admission's `CapacitySource`: a pool holds its ready servers' KV, plus what its
draining servers still use for the replies they are finishing (their leases are still held).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from config.settings import SwitchyardConfig
from contracts.engine_metrics import EngineHealth, parse_engine_health
from fleet_state.load_board import Freshness, LoadBoard, LoadReport
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from quota.capacity import ObservedPools, PoolCapacity
from router.routing_policy import ServerLoad

logger = logging.getLogger(__name__)

# A worker that routed within this many seconds reads the board every refresh_s.
ROUTING_WINDOW_S = 2.0
# The id of a pool's configured server, routed to while the pool has no registered one.
CONFIGURED_SUFFIX = "-configured"
# How long a registered server whose heartbeat stopped stays a member: its connection open
# and the replies on it running. It is routed to only while its load reports are fresh
# (`fleet.dead_after_s`), so this delays nothing new; it keeps a Redis failover (the
# heartbeats refused for a few seconds) or a supervisor restart from closing every server's
# connection and cutting every reply off (the partition run's split brain: replies failed
# mid-stream with "it left the fleet", no server left to resume on). A server really gone
# fails its replies over by itself: its connection breaks, or its keepalive times out.
MEMBERSHIP_GRACE_S = 30.0


class ServerDirectory(ObservedPools):
    """One gateway worker's view of the fleet, and admission's capacity (module docstring)."""

    def __init__(
        self,
        config: SwitchyardConfig,
        registry: ServerRegistry | None,
        board: LoadBoard | None,
        http: httpx.AsyncClient,
        on_added: Callable[[ServerInfo], None],
        on_removed: Callable[[str], None],
        *,
        host: str,
        refresh_s: float | None = None,
        registry_refresh_s: float = 30.0,
        idle_refresh_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`on_added` / `on_removed`: a server became routable / left (open and close its client).
        `host`: where a pool's configured server listens (`network.servers.advertised`); a
        registered server is reached at the host its registry entry names.
        `refresh_s`: how often the board is read (default `fleet.load_publish_s`)."""
        super().__init__()
        self._config = config
        self._registry = registry
        self._board = board
        self._http = http
        self._on_added = on_added
        self._on_removed = on_removed
        self._host = host
        self._refresh_s = refresh_s if refresh_s is not None else config.fleet.load_publish_s
        self._registry_refresh_s = registry_refresh_s
        self._idle_refresh_s = idle_refresh_s
        self._routed_at = float("-inf")  # when routing last asked for loads (monotonic)
        self._clock = clock
        self._freshness = Freshness(config.fleet.dead_after_s)
        self._registered: list[ServerInfo] = []  # as last read from the registry
        self._infos: dict[str, ServerInfo] = {}
        self._loads: dict[str, ServerLoad] = {}
        self._pool_loads: dict[str, list[ServerLoad]] = {}  # the same, by pool
        # When each server's load was sampled, on its publisher's clock (a configured server's:
        # when it was scraped): routing counts what it sent since on top of it.
        self.scraped_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def refresh_s(self) -> float:
        """How often the board is read while this worker routes."""
        return self._refresh_s

    def loads(self, pool_id: str) -> list[ServerLoad]:
        """The pool's servers as last read. Routing asks for them: the board is then read
        every `refresh_s` for the next `ROUTING_WINDOW_S`."""
        self._routed_at = time.monotonic()
        return self._pool_loads.get(pool_id, [])

    def pool_of(self, server_id: str) -> str | None:
        info = self._infos.get(server_id)
        return None if info is None else info.pool_id

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="server-directory")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        """Read the board every `refresh_s` while this worker routes (and every
        `idle_refresh_s` while it routes nothing: an idle gateway costs little, however large
        the fleet), and the registry when it announces a change (a drain must stop new work at
        once, not a period later) or every `registry_refresh_s`."""
        changes: Any = None
        registry_due = board_due = 0.0
        while True:
            try:
                if changes is None and self._registry is not None:
                    changes = await self._registry.changes()
                now = time.monotonic()
                if now >= registry_due or now >= board_due or now - self._routed_at < ROUTING_WINDOW_S:
                    await self.refresh(registry=now >= registry_due)
                    board_due = now + self._idle_refresh_s
                if now >= registry_due:
                    registry_due = now + self._registry_refresh_s
                if changes is not None:
                    message = await changes.get_message(ignore_subscribe_messages=True, timeout=self._refresh_s)
                    if message is not None:
                        # One registry read for a burst of changes (a fleet starting registers
                        # hundreds of servers at once), not one per change.
                        while await changes.get_message(ignore_subscribe_messages=True, timeout=0) is not None:
                            pass
                        registry_due = 0.0
                    continue
            except Exception:  # Redis down for a moment: keep the last view, try again
                logger.exception("server directory refresh failed")
                if changes is not None:
                    with contextlib.suppress(Exception):
                        await changes.aclose()
                changes, registry_due = None, 0.0
            await asyncio.sleep(self._refresh_s)

    async def refresh(self, *, registry: bool = True) -> None:
        """Read the board (and, with `registry`, the registry) and update the view."""
        now = self._clock()
        read_registry = registry or not self._registered
        if read_registry:
            self._registered = await self._registry.servers(now=now) if self._registry is not None else []
        infos = {info.server_id: info for info in self._servers(now)} if read_registry else self._infos
        boards = await self._board.read(self._config.pools) if self._board is not None else {}
        registered = {info.server_id for info in self._registered}
        loads: dict[str, ServerLoad] = {}
        for info in infos.values():
            if info.server_id in registered:
                loads[info.server_id] = self._reported(info, boards.get(info.pool_id, {}).get(info.server_id), now)
            else:
                loads[info.server_id] = await self._scrape(info, now)
        if read_registry:
            self._apply_membership(infos)
        self._infos, self._loads = infos, loads
        pool_loads: dict[str, list[ServerLoad]] = {}
        for server_id, load in loads.items():
            pool_loads.setdefault(infos[server_id].pool_id, []).append(load)
        self._pool_loads = pool_loads
        self._update_capacity()

    def _apply_membership(self, infos: dict[str, ServerInfo]) -> None:
        """Open streams to servers that joined, close those to servers that left."""
        self._freshness.forget_all_but(infos)
        # A server that came back elsewhere under its id (new ports) is a new server to stream to.
        moved = {
            sid for sid, info in infos.items() if sid in self._infos and self._infos[sid].grpc_url != info.grpc_url
        }
        for server_id in (set(self._infos) - set(infos)) | moved:
            self._on_removed(server_id)
            if server_id not in infos:
                self.scraped_at.pop(server_id, None)
        for server_id, info in infos.items():
            if server_id not in self._infos or server_id in moved:
                self._on_added(info)

    def _update_capacity(self) -> None:
        capacity: dict[str, PoolCapacity] = {}
        for pool_id in self._config.pools:
            loads = self._pool_loads.get(pool_id, [])
            ready = [load for load in loads if load.state is ServerState.READY]
            draining = [load for load in loads if load.state is ServerState.DRAINING]
            capacity[pool_id] = PoolCapacity(
                pool_id,
                capacity_tokens=sum(load.capacity_tokens for load in ready)
                + sum(max(0, load.capacity_tokens - load.free_tokens) for load in draining),
                free_tokens=sum(load.free_tokens for load in ready),
                ready_servers=len(ready),
                servers=len(loads),
            )
        self._observe(capacity)

    def _servers(self, now: float) -> list[ServerInfo]:
        pools = {info.pool_id for info in self._registered}
        configured = [
            self._configured(pool_id, now)
            for pool_id, pool in self._config.pools.items()
            if pool_id not in pools and pool.target_copies > 0
        ]
        return [info for info in self._registered if info.state is not ServerState.DEAD] + configured

    def _configured(self, pool_id: str, now: float) -> ServerInfo:
        ports = self._config.pools[pool_id].ports
        return ServerInfo(
            server_id=f"{pool_id}{CONFIGURED_SUFFIX}", pool_id=pool_id, host=self._host, http_port=ports.http,
            grpc_port=ports.grpc, metrics_port=ports.metrics, gpus=(), state=ServerState.READY,
            started_at=now, heartbeat_at=now,
        )  # fmt: skip

    def _reported(self, info: ServerInfo, report: LoadReport | None, now: float) -> ServerLoad:
        """A registered server's load from its latest report."""
        state = info.state
        health = None
        if state in (ServerState.READY, ServerState.DRAINING):
            if report is not None and self._freshness.fresh(report, now) and report.health is not None:
                health = report.health
                self.scraped_at[info.server_id] = report.sampled_at
            else:
                state = ServerState.DEAD  # silent or unreadable: not routed to until it reports again
        return _load(info.server_id, state, health)

    async def _scrape(self, info: ServerInfo, now: float) -> ServerLoad:
        """A configured server (no publisher): its metrics, read from here."""
        try:
            response = await self._http.get(info.metrics_url, timeout=max(self._refresh_s * 2, 1.0))
            response.raise_for_status()
            health = parse_engine_health(response.text)
        except (httpx.HTTPError, ValueError):
            return _load(info.server_id, ServerState.DEAD, None)  # unreadable: not routed to
        self.scraped_at[info.server_id] = now
        return _load(info.server_id, info.state, health)


def _load(server_id: str, state: ServerState, health: EngineHealth | None) -> ServerLoad:
    if health is None:
        return ServerLoad(server_id, state, 0, 0, 0, 0)
    return ServerLoad(
        server_id,
        state,
        health.capacity_tokens,
        health.free_tokens,
        health.active,
        health.waiting,
        bulk_tokens=health.preemptible_tokens,  # flex and bulk: what priority and interactive may take
    )
