"""The fleet page's numbers: every server by pool, with the load it last published and the
autoscaler's latest decision, from the stores everything else already reads.

    servers   fleet_state/registry.py      SMEMBERS sy:servers + HGETALL each    (what /admin/servers reads)
    load      fleet_state/load_board.py     HGETALL sy:load:{pool} per pool       (what the routers read)
    autoscale fleet_state/pool_targets.py   HGETALL sy:pool:{pool}:target         (what `switchyard servers` reads)

One page view costs Redis a few pipelined reads, once per person looking, never per request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleet_state.load_board import LoadBoard, LoadReport
from fleet_state.pool_targets import PoolTarget, PoolTargetStore
from fleet_state.registry import ServerInfo, ServerRegistry


@dataclass(frozen=True, slots=True)
class ServerRow:
    server_id: str
    state: str
    kv_used_tokens: int | None  # None: its load is not readable (loading, sick, gone)
    kv_capacity_tokens: int | None
    running: int | None
    waiting: int | None
    heartbeat_age_s: float
    load_age_s: float | None
    can_drain: bool

    @property
    def kv_percent(self) -> float | None:
        if self.kv_used_tokens is None or not self.kv_capacity_tokens:
            return None
        return 100.0 * self.kv_used_tokens / self.kv_capacity_tokens


@dataclass(frozen=True, slots=True)
class PoolView:
    pool_id: str
    servers: list[ServerRow]
    target: PoolTarget | None  # None: no autoscaler has decided for it lately

    @property
    def copies(self) -> int:
        """The copies it runs now (every registered server not yet dead)."""
        return sum(1 for s in self.servers if s.state != "dead")


def server_row(info: ServerInfo, report: LoadReport | None, now: float) -> ServerRow:
    health = report.health if report is not None else None
    return ServerRow(
        server_id=info.server_id,
        state=info.state.value,
        kv_used_tokens=None if health is None else health.capacity_tokens - health.free_tokens,
        kv_capacity_tokens=None if health is None else health.capacity_tokens,
        running=None if health is None else health.active,
        waiting=None if health is None else health.waiting,
        heartbeat_age_s=max(0.0, now - info.heartbeat_at),
        load_age_s=None if report is None else max(0.0, now - report.sampled_at),
        can_drain=info.state.value in ("starting", "ready"),
    )


async def read_fleet(
    registry: ServerRegistry, board: LoadBoard, targets: PoolTargetStore, pool_ids: Iterable[str], now: float
) -> list[PoolView]:
    """Every configured pool (and any other a server registered in), sorted by id."""
    servers = await registry.servers(now=now)
    pools = sorted({*pool_ids, *(info.pool_id for info in servers)})
    loads = await board.read(pools)
    decided = await targets.read(pools)
    views = []
    for pool_id in pools:
        pool_loads = loads.get(pool_id, {})
        rows = [
            server_row(info, pool_loads.get(info.server_id), now)
            for info in sorted(servers, key=lambda s: s.server_id)
            if info.pool_id == pool_id
        ]
        views.append(PoolView(pool_id, rows, decided.get(pool_id)))
    return views
