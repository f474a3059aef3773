"""How many KV tokens each pool holds, read from its servers' engine metrics.

Both engines export TensorRT-LLM's gauge (contracts/engine_metrics.py), one sample per block type:

    nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="cpu_engine",version="1"} 5000
    nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="cpu_engine",version="1"} 16

A server holds max × tokens_per tokens (summed over the engine models it hosts); a pool holds
the sum over its ready servers. A server that cannot be scraped, or exports no KV gauge yet
(still loading), counts zero: admission must not lease memory that may not be there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx
from redis.exceptions import RedisError

from config.settings import SwitchyardConfig
from contracts.engine_metrics import KvCache, parse_kv_cache
from fleet_state.load_board import Freshness, LoadBoard

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """A pool's KV tokens across its ready servers, as last observed."""

    pool_id: str
    capacity_tokens: int = 0
    free_tokens: int = 0
    ready_servers: int = 0
    servers: int = 0
    interactive_requests: int = 0  # in the servers' engines (admitted or waiting)


class CapacitySource(Protocol):
    """What admission needs to know of the fleet: capacity per pool, and when it changes."""

    def capacity(self, pool_id: str) -> PoolCapacity: ...

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call `listener(pool_id)` whenever the pool's capacity changes."""


class StaticCapacity:
    """Fixed capacities, changed by hand: for tests, the simulator and a fleet without metrics."""

    def __init__(self, capacities: Mapping[str, int]) -> None:
        self._capacities = dict(capacities)
        self._listeners: list[Callable[[str], None]] = []

    def capacity(self, pool_id: str) -> PoolCapacity:
        tokens = self._capacities.get(pool_id, 0)
        return PoolCapacity(pool_id, tokens, tokens, int(tokens > 0), int(tokens > 0))

    def subscribe(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def set(self, pool_id: str, capacity_tokens: int) -> None:
        self._capacities[pool_id] = capacity_tokens
        for listener in self._listeners:
            listener(pool_id)


def config_metrics_urls(config: SwitchyardConfig, host: str = "127.0.0.1") -> dict[str, list[str]]:
    """The configured fleet: `target_copies` servers per pool, copy k on the pool's metrics
    port + 10·k (`PoolSpec.copy_ports`); a drained or dead copy just counts zero."""
    return {
        pool_id: [f"http://{host}:{pool.copy_ports(k).metrics}/metrics" for k in range(pool.target_copies)]
        for pool_id, pool in config.pools.items()
    }


class ObservedPools:
    """A `CapacitySource`'s common part: the pools' capacity as last observed, and the
    listeners told when a pool's changes (its subclasses observe, then call `_observe`)."""

    def __init__(self) -> None:
        self._pools: dict[str, PoolCapacity] = {}
        self._listeners: list[Callable[[str], None]] = []

    def capacity(self, pool_id: str) -> PoolCapacity:
        """The last observation (zero before the first refresh: nothing is known to be there)."""
        return self._pools.get(pool_id, PoolCapacity(pool_id))

    def subscribe(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def _observe(self, pools: dict[str, PoolCapacity]) -> None:
        changed = [
            p for p in pools.keys() | self._pools.keys() if self.capacity(p).capacity_tokens != _tokens(pools, p)
        ]
        self._pools = pools
        for pool_id in sorted(changed):
            for listener in self._listeners:
                listener(pool_id)


class _ServerKv(Protocol):
    """What a pool's capacity sums over its ready servers (KvCache, EngineHealth)."""

    @property
    def capacity_tokens(self) -> int: ...
    @property
    def free_tokens(self) -> int: ...
    @property
    def interactive_requests(self) -> int: ...


def _pool_capacity(pool_id: str, ready: Sequence[_ServerKv], *, servers: int) -> PoolCapacity:
    return PoolCapacity(
        pool_id,
        capacity_tokens=sum(server.capacity_tokens for server in ready),
        free_tokens=sum(server.free_tokens for server in ready),
        ready_servers=len(ready),
        servers=servers,
        interactive_requests=sum(server.interactive_requests for server in ready),
    )


def _tokens(pools: Mapping[str, PoolCapacity], pool_id: str) -> int:
    pool = pools.get(pool_id)
    return pool.capacity_tokens if pool is not None else 0


class CapacityMonitor(ObservedPools):
    """Polls every server's metrics each `refresh_s` and keeps each pool's capacity.

    `endpoints` returns the metrics URLs per pool at each refresh, so the server list can come
    from the configuration today and from the router's registry later."""

    def __init__(
        self,
        endpoints: Callable[[], Mapping[str, Sequence[str]]],
        client: httpx.AsyncClient,
        refresh_s: float,
        timeout_s: float = 2.0,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be positive, got {refresh_s}")
        super().__init__()
        self._endpoints = endpoints
        self._client = client
        self.refresh_s = refresh_s
        self._timeout_s = min(timeout_s, refresh_s * 2)

    async def refresh(self) -> dict[str, PoolCapacity]:
        """Scrape every server once (concurrently) and update the pools; returns them."""
        endpoints = {pool_id: list(urls) for pool_id, urls in self._endpoints().items()}
        urls = [url for pool_urls in endpoints.values() for url in pool_urls]
        caches = dict(zip(urls, await asyncio.gather(*(self._scrape(url) for url in urls)), strict=True))
        pools: dict[str, PoolCapacity] = {}
        for pool_id, pool_urls in endpoints.items():
            ready = [cache for url in pool_urls if (cache := caches[url]) is not None and cache.capacity_tokens > 0]
            pools[pool_id] = _pool_capacity(pool_id, ready, servers=len(pool_urls))
        self._observe(pools)
        return pools

    async def run(self) -> None:
        """Refresh every `refresh_s` until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    async def _scrape(self, url: str) -> KvCache | None:
        try:
            response = await self._client.get(url, timeout=self._timeout_s)
            response.raise_for_status()
            return parse_kv_cache(response.text)
        except (httpx.HTTPError, ValueError):
            return None  # unreachable or unreadable: counts zero


class BoardCapacity(ObservedPools):
    """Each pool's KV capacity from the load board (what its servers publish), read every
    `refresh_s`: one HGETALL per pool, however many servers. A pool nothing publishes for (a
    server started by hand, without a server id) is read from its configured servers' metrics
    by `fallback`."""

    def __init__(
        self,
        board: LoadBoard,
        pool_ids: Sequence[str],
        fallback: CapacityMonitor,
        *,
        dead_after_s: float,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._board = board
        self._pool_ids = list(pool_ids)
        self._fallback = fallback
        self._freshness = Freshness(dead_after_s)
        self.refresh_s = refresh_s
        self._clock = clock

    async def refresh(self) -> dict[str, PoolCapacity]:
        now = self._clock()
        boards = await self._board.read(self._pool_ids)
        silent = [pool_id for pool_id in self._pool_ids if not boards[pool_id]]
        fallback = await self._fallback.refresh() if silent else {}
        pools: dict[str, PoolCapacity] = {}
        for pool_id in self._pool_ids:
            if pool_id in silent:
                pools[pool_id] = fallback.get(pool_id, PoolCapacity(pool_id))
                continue
            reports = boards[pool_id].values()
            ready = [
                r.health
                for r in reports
                if self._freshness.fresh(r, now) and r.ready and r.health is not None and r.health.capacity_tokens > 0
            ]
            pools[pool_id] = _pool_capacity(pool_id, ready, servers=len(reports))
        self._freshness.forget_all_but(server for board in boards.values() for server in board)
        self._observe(pools)
        return pools

    async def run(self) -> None:
        """Refresh every `refresh_s` until cancelled; a failed read keeps the last view."""
        while True:
            try:
                await self.refresh()
            except (OSError, RedisError):
                logger.warning("cannot read the load board; keeping the last view", exc_info=True)
            await asyncio.sleep(self.refresh_s)
