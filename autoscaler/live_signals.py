"""`PoolSignals` for every pool, read from the running platform: the live side of the seam in
`autoscaler/signals.py` (the simulator builds the same records from its own state).

    registry (Redis)         ─▶ ready / starting / draining servers per pool
    each server's /metrics   ─▶ KV in use less flex's and requests waiting (ready servers),
                                requests in the engines per class (ready and draining)
                                (`engine_classes.py`)
    usage buckets (Redis)    ─▶ requests ended per class since the last read (every gateway)
    gateway /metrics         ─▶ the demand classes' time to first token p99 since the last read
                                (`TtftWindow`)
    batches (Redis)          ─▶ bulk tokens left and deadlines (`BulkBacklog`)

Arrivals per second between two reads, for each interactive-shaped class (priority,
interactive, flex; the policies start servers for the first two only, `demand_classes.py`):

    rate(class) = (ended(class) + Δ requests of the class in the engines) / Δt

Requests are counted when they end (usage is metered then); adding the change in what the
engines hold counts the ones that arrived and have not ended yet, so a ramp shows at once
rather than one reply-length later. A model served by several pools splits its count by the
pools' ready servers. The first read has nothing to difference against: its rates are 0.

The engines export their waiting requests without a class, so live `waiting_requests` counts
flex (and bulk) queued in an engine too; the simulator counts the demand classes only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from autoscaler.bulk_backlog import BulkBacklog
from autoscaler.engine_classes import EngineClasses, parse_engine_classes
from autoscaler.signals import BulkDemand, PoolSignals
from autoscaler.ttft_window import TtftWindow
from autoscaler.usage_rates import EndedCounts, EndedRequests
from config.settings import SwitchyardConfig
from contracts.engine_metrics import EngineHealth, parse_engine_health
from contracts.service_tier import INTERACTIVE_SHAPED, REQUEST_CLASSES, RequestClass
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState

_SCRAPE_TIMEOUT_S = 2.0
# The classes that arrive as a rate, highest first (bulk comes in batches: `BulkBacklog`).
RATE_CLASSES: tuple[RequestClass, ...] = tuple(c for c in REQUEST_CLASSES if c in INTERACTIVE_SHAPED)


@dataclass(frozen=True, slots=True)
class ServerScrape:
    """One server's engine gauges, and what its engines hold per class."""

    health: EngineHealth
    classes: EngineClasses


def parse_server_scrape(metrics_text: str) -> ServerScrape:
    return ServerScrape(parse_engine_health(metrics_text), parse_engine_classes(metrics_text))


class LiveSignals:
    """Reads the signals of `pool_ids` each time `read` is called (once per autoscaler pass)."""

    def __init__(
        self,
        config: SwitchyardConfig,
        pool_ids: Sequence[str],
        registry: ServerRegistry,
        ended: EndedRequests,
        backlog: BulkBacklog,
        http: httpx.AsyncClient,
        gateway_metrics_urls: Sequence[str] = (),
    ) -> None:
        self._config = config
        self._pool_ids = list(pool_ids)
        self._registry = registry
        self._ended = ended
        self._backlog = backlog
        self._http = http
        self._ttft = {url: TtftWindow() for url in gateway_metrics_urls}
        # pool -> requests per class in its engines at the last read
        self._in_engines: dict[str, dict[RequestClass, int]] = {}
        self._last_at: float | None = None

    async def read(self, now: float) -> dict[str, PoolSignals]:
        """Every pool's signals at `now` (Unix time)."""
        servers = await self._registry.servers(now=now)
        scraped = [s for s in servers if s.state in (ServerState.READY, ServerState.DRAINING)]
        scrapes, ended, bulk, _ = await asyncio.gather(
            asyncio.gather(*(self._scrape(s) for s in scraped)),
            self._ended.read(now),
            self._backlog.read(),
            self._read_gateways(),
        )
        by_server = dict(zip((s.server_id for s in scraped), scrapes, strict=True))
        elapsed = None if self._last_at is None else max(now - self._last_at, 1e-3)
        self._last_at = now
        signals: dict[str, PoolSignals] = {}
        for pool_id in self._pool_ids:
            mine = [s for s in servers if s.pool_id == pool_id]
            signals[pool_id] = self._pool_signals(pool_id, mine, servers, by_server, ended, elapsed, now, bulk)
        return signals

    def _pool_signals(
        self,
        pool_id: str,
        mine: list[ServerInfo],
        servers: list[ServerInfo],
        by_server: dict[str, ServerScrape | None],
        ended: EndedCounts | None,
        elapsed: float | None,
        now: float,
        bulk: dict[str, tuple[BulkDemand, ...]],
    ) -> PoolSignals:
        states = [s.state for s in mine]  # dead servers are nobody's capacity: not counted
        ready = [scrape for s in mine if s.state is ServerState.READY and (scrape := by_server.get(s.server_id))]
        healths = [r.health for r in ready]
        capacity = sum(h.capacity_tokens for h in healths)
        # Flex fills what runs: its KV asks for no server.
        used = sum(r.health.capacity_tokens - r.health.free_tokens - r.classes.flex_kv_tokens for r in ready)
        scrapes = [scrape for s in mine if (scrape := by_server.get(s.server_id)) is not None]
        in_engines = {c: sum(scrape.classes.requests.get(c, 0) for scrape in scrapes) for c in RATE_CLASSES}
        model_id = self._config.pools[pool_id].model_id
        rates = dict.fromkeys(RATE_CLASSES, 0.0)
        before = self._in_engines.get(pool_id, in_engines)
        if ended is not None and elapsed is not None:
            share = self._share(pool_id, model_id, servers)
            ended_here = ended.get(model_id, {})
            for request_class in RATE_CLASSES:
                arrived = ended_here.get(request_class, 0) * share
                arrived += in_engines[request_class] - before[request_class]
                rates[request_class] = max(0.0, arrived / elapsed)
        self._in_engines[pool_id] = in_engines
        ttfts = [p for window in self._ttft.values() if (p := window.p99([model_id])) is not None]
        return PoolSignals(
            pool_id=pool_id,
            now=now,
            ready=states.count(ServerState.READY),
            starting=states.count(ServerState.STARTING),
            draining=states.count(ServerState.DRAINING),
            arrival_rates=rates,
            kv_used_fraction=used / capacity if capacity > 0 else 0.0,
            waiting_requests=sum(h.waiting for h in healths),
            ttft_p99_s=max(ttfts, default=None),
            bulk=bulk.get(pool_id, ()),
        )

    def _share(self, pool_id: str, model_id: str, servers: list[ServerInfo]) -> float:
        """This pool's part of the model's requests: its share of the model's ready servers."""
        pools = self._config.pools_for_model(model_id)
        ready = {p: sum(1 for s in servers if s.pool_id == p and s.state is ServerState.READY) for p in pools}
        total = sum(ready.values())
        return ready[pool_id] / total if total else 1.0 / len(pools)

    async def _scrape(self, info: ServerInfo) -> ServerScrape | None:
        try:
            response = await self._http.get(info.metrics_url, timeout=_SCRAPE_TIMEOUT_S)
            response.raise_for_status()
            return parse_server_scrape(response.text)
        except (httpx.HTTPError, ValueError):
            return None

    async def _read_gateways(self) -> None:
        async def one(url: str, window: TtftWindow) -> None:
            try:
                response = await self._http.get(url, timeout=_SCRAPE_TIMEOUT_S)
                response.raise_for_status()
                window.observe(response.text)
            except (httpx.HTTPError, ValueError):
                window.forget()

        await asyncio.gather(*(one(url, window) for url, window in self._ttft.items()))
