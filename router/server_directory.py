"""The fleet as one gateway process sees it, refreshed every `refresh_s`:

    registry (Redis)  ──▶ each pool's servers and states (starting, ready, draining, dead)
    each server's metrics ──▶ KV capacity and free tokens, requests active and waiting
    streams           ──▶ a gRPC client per routable server (added and removed as they come and go)

A pool with no registered server falls back to the server its `switchyard.yaml` ports name
(one started by hand with `switchyard triton`), taken as ready while its metrics answer.
A server whose metrics cannot be read is not routed to until they can.

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
from contracts.engine_metrics import parse_engine_health
from quota.capacity import PoolCapacity
from router.registry import ServerInfo, ServerRegistry
from router.routing_policy import ServerLoad, ServerState

logger = logging.getLogger(__name__)


class ServerDirectory:
    def __init__(
        self,
        config: SwitchyardConfig,
        registry: ServerRegistry | None,
        http: httpx.AsyncClient,
        on_added: Callable[[ServerInfo], None],
        on_removed: Callable[[str], None],
        *,
        host: str = "127.0.0.1",
        refresh_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`on_added` / `on_removed`: a server became routable / left (open and close its client)."""
        self._config = config
        self._registry = registry
        self._http = http
        self._on_added = on_added
        self._on_removed = on_removed
        self._host = host
        self._refresh_s = refresh_s
        self._clock = clock
        self._infos: dict[str, ServerInfo] = {}
        self._loads: dict[str, ServerLoad] = {}
        self.scraped_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._capacity: dict[str, PoolCapacity] = {}
        self._listeners: list[Callable[[str], None]] = []

    def capacity(self, pool_id: str) -> PoolCapacity:
        return self._capacity.get(pool_id, PoolCapacity(pool_id))

    def subscribe(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def loads(self, pool_id: str) -> list[ServerLoad]:
        return [load for sid, load in self._loads.items() if self._infos[sid].pool_id == pool_id]

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
        """Refresh every `refresh_s`, and at once when the registry announces a change (a
        drain must stop new work within milliseconds, not half a second)."""
        changes: Any = None
        try:
            while True:
                try:
                    await self.refresh()
                    if changes is None and self._registry is not None:
                        changes = await self._registry.changes()
                    if changes is not None:
                        await changes.get_message(ignore_subscribe_messages=True, timeout=self._refresh_s)
                        continue
                except Exception:  # Redis down for a moment: keep the last view, try again
                    logger.exception("server directory refresh failed")
                    changes = None
                await asyncio.sleep(self._refresh_s)
        finally:
            if changes is not None:
                await changes.aclose()

    async def refresh(self) -> None:
        now = self._clock()
        infos = {info.server_id: info for info in await self._servers(now)}
        probes = await asyncio.gather(*(self._scrape(info) for info in infos.values()))
        loads: dict[str, ServerLoad] = {}
        for info, load in zip(infos.values(), probes, strict=True):
            loads[info.server_id] = load
            self.scraped_at[info.server_id] = now
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
        self._infos, self._loads = infos, loads
        self._update_capacity()

    def _update_capacity(self) -> None:
        capacity: dict[str, PoolCapacity] = {}
        for pool_id in self._config.pools:
            loads = self.loads(pool_id)
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
        changed = [p for p in capacity if capacity[p].capacity_tokens != self.capacity(p).capacity_tokens]
        self._capacity = capacity
        for pool_id in changed:
            for listener in self._listeners:
                listener(pool_id)

    async def _servers(self, now: float) -> list[ServerInfo]:
        registered = await self._registry.servers(now=now) if self._registry is not None else []
        pools = {info.pool_id for info in registered}
        configured = [
            self._configured(pool_id, now)
            for pool_id, pool in self._config.pools.items()
            if pool_id not in pools and pool.target_copies > 0
        ]
        return [info for info in registered if info.state is not ServerState.DEAD] + configured

    def _configured(self, pool_id: str, now: float) -> ServerInfo:
        ports = self._config.pools[pool_id].ports
        return ServerInfo(
            server_id=f"{pool_id}-configured", pool_id=pool_id, host=self._host, http_port=ports.http,
            grpc_port=ports.grpc, metrics_port=ports.metrics, gpus=(), state=ServerState.READY,
            started_at=now, heartbeat_at=now,
        )  # fmt: skip

    async def _scrape(self, info: ServerInfo) -> ServerLoad:
        state = info.state
        health: Any = None
        if state in (ServerState.READY, ServerState.DRAINING):
            try:
                response = await self._http.get(info.metrics_url, timeout=self._refresh_s * 2)
                response.raise_for_status()
                health = parse_engine_health(response.text)
            except (httpx.HTTPError, ValueError):
                state = ServerState.DEAD  # unreadable: not routed to until it answers again
        if health is None:
            return ServerLoad(info.server_id, state, 0, 0, 0, 0)
        return ServerLoad(
            info.server_id,
            state,
            health.capacity_tokens,
            health.free_tokens,
            health.active,
            health.waiting,
            bulk_tokens=health.bulk_tokens,
        )
