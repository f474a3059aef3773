"""Each pool's load as the dispatcher needs it: KV capacity from the servers' metrics, leases
and interactive waiters from admission's records in Redis (every gateway's)."""

from __future__ import annotations

from typing import Protocol

from bulk.release_policy import PoolLoad
from quota.capacity import CapacitySource
from quota.leases import LeaseStore


class PoolLoadSource(Protocol):
    async def pool_load(self, pool_id: str, bulk_inflight_tokens: int, bulk_inflight_requests: int) -> PoolLoad: ...


class LivePoolLoads:
    """Capacity as last scraped (the caller keeps the monitor running), leases read now."""

    def __init__(self, capacity: CapacitySource, leases: LeaseStore) -> None:
        self._capacity = capacity
        self._leases = leases

    async def pool_load(self, pool_id: str, bulk_inflight_tokens: int, bulk_inflight_requests: int) -> PoolLoad:
        loads = await self._leases.loads(pool_id)
        capacity = self._capacity.capacity(pool_id)
        return PoolLoad(
            pool_id=pool_id,
            capacity_tokens=capacity.capacity_tokens,
            leased_tokens=sum(load.in_use for load in loads.values()),
            bulk_inflight_tokens=bulk_inflight_tokens,
            bulk_inflight_requests=bulk_inflight_requests,
            interactive_waiting=sum(load.waiters for load in loads.values()),
            interactive_running=capacity.interactive_requests,
        )
