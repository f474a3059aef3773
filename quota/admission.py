"""Admission: may this team's request take this much KV in this pool now, and at what priority?

    admit(team, pool, tokens, class)
        │ reserve (one Redis script: share maths + lease, atomic across gateways)
        ├─ ADMIT / BORROW ─────────────────────────────▶ Lease (borrowed: send at bulk priority)
        ├─ REFUSE_TEAM / REFUSE_LIMIT ─────────────────▶ AdmissionRefused 429 + Retry-After
        ├─ TOO_LARGE ──────────────────────────────────▶ AdmissionRefused 413 (param max_tokens)
        └─ FLEET_FULL ─┬─ bulk ────────────────────────▶ AdmissionRefused 503 + Retry-After
                       └─ priority, interactive: wait in the pool's queue, tier first then fair
                          by the team's weight in the tier (marked waiting in Redis, so other
                          teams stop borrowing), retry when room frees, and after
                          `queue_timeout_s` ───────────▶ AdmissionRefused 503 + Retry-After

Flex (docs/tiers.md) runs only on room the higher tiers leave: the script sees it as it sees
bulk (never admitted while a higher tier waits, never against borrowers' room), at its full
size. Found no room (FLEET_FULL, or REFUSE_TEAM: beyond its share with no idle room), it waits
behind the higher tiers' waiters for `quota.flex_wait_s`, then 429 `flex_capacity_unavailable`
with Retry-After.

The caller keeps the lease alive while the request runs (`renewing`: one renewal call for all of
a process's leases) and releases it at the end.
Bulk never queues here: the bulk dispatcher retries later, and bulk is never admitted while
interactive requests wait in the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import redis.asyncio
from redis.exceptions import RedisError

from config.script_runner import ScriptRunner
from config.settings import SwitchyardConfig
from config.tier_names import RequestClass
from contracts.service_tier import CLASS_RANK, FLEX_CAPACITY_UNAVAILABLE, REQUEST_CLASSES, TIER_OF_CLASS
from quota.capacity import CapacitySource
from quota.fair_queue import FairQueue
from quota.lease_size import bulk_lease_tokens
from quota.leases import Lease, LeaseStore, ReserveOutcome, WaiterMark
from quota.shares import Decision, ShareDecision, SharePolicy, TeamLimits, TeamLoad

logger = logging.getLogger(__name__)

# A queued request's waiting mark outlives its deadline by this much, so the mark is never
# gone while the request still tries; a dead gateway's marks still go soon after.
_WAIT_MARK_SLACK_S = 1.0
# Leases renewed per script call: bounds how long one call holds Redis.
_RENEW_BATCH = 500


class AdmissionRefused(Exception):
    """The request may not run now. `status` is the HTTP status to answer (429: the team is
    at its share or a limit; 503: the fleet is full; 413: the request exceeds a limit of the
    team and never fits), `retry_after_s` the Retry-After header (None for 413)."""

    def __init__(
        self,
        status: int,
        retry_after_s: int | None,
        message: str,
        param: str | None = None,
        decision: Decision = Decision.FLEET_FULL,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.message = message
        self.param = param
        self.decision = decision
        self.code = code  # the error's code, where the status's usual one says too little


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """For /metrics: a pool's capacity, the leases in force per team (as last seen in Redis,
    every gateway's), and this process's queued requests per team."""

    capacity_tokens: int
    leases: dict[str, TeamLoad] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)


class Admission:
    """Shares, leases and the fair queue behind one gateway process's admissions."""

    def __init__(
        self,
        config: SwitchyardConfig,
        client: redis.asyncio.Redis,
        capacity: CapacitySource,
        clock: Callable[[], float] = time.time,
        *,
        queue_poll_s: float = 0.05,
        prefix: str = "sy:",
        scripts: ScriptRunner | None = None,
    ) -> None:
        """`clock` (epoch seconds) stamps leases, so every gateway must share one time base;
        `queue_poll_s`: how often a queued request retries when nothing in this process woke
        it (room also frees when other processes release); `scripts`: how the lease scripts
        run (`LeaseStore`)."""
        self.policy = SharePolicy(
            {team: spec.weight for team, spec in config.teams.items()},
            {team: TeamLimits(spec.max_inflight_tokens, spec.tokens_per_day) for team, spec in config.teams.items()},
        )
        self.store = LeaseStore(client, self.policy, clock, prefix, scripts)
        self._tier_weights = {team: spec.tier_weights for team, spec in config.teams.items()}
        self._quota = config.quota
        self._bulk_lease_fraction = config.bulk.lease_fraction
        self._clock = clock
        self._capacity = capacity
        self._poll_s = queue_poll_s
        self._queues = {pool_id: FairQueue() for pool_id in config.pools}
        self._seen: dict[str, dict[str, TeamLoad]] = {}
        self._held: dict[str, Lease] = {}  # leases this process keeps alive (`renewing`)
        self._keeper: asyncio.Task[None] | None = None
        capacity.subscribe(self._capacity_changed)

    async def admit(
        self, team_id: str, pool_id: str, tokens: int, request_class: RequestClass, *, expected_s: float | None = None
    ) -> Lease:
        """A lease for `tokens` of KV (prompt + max_tokens), or AdmissionRefused. Bulk leases
        `bulk.lease_fraction` of them (`quota.lease_size`).

        `expected_s`: how long the request should take, if the caller can tell; it makes a
        refused team's Retry-After sharper (the lease TTL is assumed otherwise)."""
        if request_class not in REQUEST_CLASSES:
            raise ValueError(f"request_class must be one of {REQUEST_CLASSES}, got {request_class!r}")
        if pool_id not in self._queues:
            raise ValueError(f"unknown pool {pool_id!r}")
        if team_id not in self.policy.weights:
            raise ValueError(f"unknown team {team_id!r}")
        # Admitted ahead of lower tiers, against borrowers' room, and queued when the fleet is full.
        owner = request_class in ("priority", "interactive")
        if request_class == "bulk":
            tokens = bulk_lease_tokens(tokens, self._bulk_lease_fraction)
        wait_s = self._quota.queue_timeout_s if owner else self._quota.flex_wait_s if request_class == "flex" else 0.0
        mark = (
            WaiterMark(uuid.uuid4().hex, self._clock() + wait_s + _WAIT_MARK_SLACK_S) if owner and wait_s > 0 else None
        )
        # Every request tries at once, queue or no queue: a refusal (429) must not wait, and a
        # request that fits now takes room the waiters' larger requests could not use.
        outcome = await self._reserve(team_id, pool_id, tokens, request_class, expected_s, mark)
        if outcome.lease is not None:
            return outcome.lease
        if wait_s > 0 and _waits_for_room(request_class, outcome.decision.decision):
            return await self._wait_for_room(
                team_id, pool_id, tokens, request_class, wait_s, expected_s, mark, outcome.decision
            )
        if request_class == "flex" and _waits_for_room(request_class, outcome.decision.decision):
            raise _flex_refusal(pool_id, outcome.decision, wait_s)
        raise _refusal(outcome.decision)

    async def release(self, lease: Lease) -> bool:
        """Give the lease's tokens back (idempotent) and wake the pool's queue."""
        released = await self.store.release(lease)
        if lease.pool_id in self._queues:
            self._queues[lease.pool_id].kick()
        return released

    @contextlib.asynccontextmanager
    async def renewing(self, lease: Lease) -> AsyncIterator[None]:
        """Keep `lease` alive while the body runs (the caller releases it). Every lease this
        process holds is renewed by one script call every third of the TTL, so what renewal
        costs Redis grows with the gateway processes, not with the requests or their length."""
        self._held[lease.lease_id] = lease
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.create_task(self._keep_alive(), name="lease-keeper")
        try:
            yield
        finally:
            self._held.pop(lease.lease_id, None)

    def snapshot(self) -> dict[str, PoolSnapshot]:
        """Per pool, as last seen: no I/O, so /metrics can call it freely (see refresh_snapshot)."""
        return {
            pool_id: PoolSnapshot(
                self._capacity.capacity(pool_id).capacity_tokens, self._seen.get(pool_id, {}), q.lengths()
            )
            for pool_id, q in self._queues.items()
        }

    async def refresh_snapshot(self) -> dict[str, PoolSnapshot]:
        """Read every pool's leases from Redis (reclaiming expired ones), then `snapshot()`."""
        for pool_id in self._queues:
            self._seen[pool_id] = await self.store.loads(pool_id)
        return self.snapshot()

    async def _reserve(
        self,
        team_id: str,
        pool_id: str,
        tokens: int,
        request_class: RequestClass,
        expected_s: float | None,
        mark: WaiterMark | None,
    ) -> ReserveOutcome:
        outcome = await self.store.reserve(
            team_id,
            pool_id,
            tokens,
            self._quota.lease_ttl_s,
            capacity_tokens=self._capacity.capacity(pool_id).capacity_tokens,
            # priority / interactive: an owner of the pool's room (the script's word)
            interactive=request_class in ("priority", "interactive"),
            priority=request_class == "priority",
            flex=request_class == "flex",
            expected_s=expected_s,
            waiter=mark,
        )
        loads = dict(outcome.pool.loads)
        if (lease := outcome.lease) is not None:
            load = loads.get(team_id, TeamLoad())
            kinds = ("owned_tokens", "borrowed_tokens", "preemptible_tokens", "priority_tokens", "flex_tokens")
            kind = kinds[lease.kind]
            loads[team_id] = replace(load, **{kind: getattr(load, kind) + lease.tokens})
        self._seen[pool_id] = loads
        return outcome

    async def _wait_for_room(
        self,
        team_id: str,
        pool_id: str,
        tokens: int,
        request_class: RequestClass,
        wait_s: float,
        expected_s: float | None,
        mark: WaiterMark | None,
        last: ShareDecision,
    ) -> Lease:
        """Queue in the pool's order (tier, then fair inside it) until admitted, refused
        otherwise, or `wait_s` passes (503; a flex request's 429).

        Only the head of the queue tries again, when kicked (a release here, a capacity
        change) or every `queue_poll_s` (releases by other gateways): the room that frees goes
        to the waiters in order. The Redis waiting mark of a priority or interactive waiter,
        set by the FLEET_FULL answer, stops other teams borrowing (and flex and bulk starting)
        meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        weight = self._tier_weights[team_id].get(TIER_OF_CLASS[request_class], self.policy.weights[team_id])
        queue = self._queues[pool_id]
        waiter = queue.join(team_id, tokens, weight, kick=False, rank=CLASS_RANK[request_class])
        served = False
        try:
            while (remaining := deadline - loop.time()) > 0:
                await waiter.wait(min(self._poll_s, remaining))
                if not waiter.is_head:
                    continue
                outcome = await self._reserve(team_id, pool_id, tokens, request_class, expected_s, mark)
                if outcome.lease is not None:
                    served = True
                    return outcome.lease
                if not _waits_for_room(request_class, outcome.decision.decision):
                    raise _refusal(outcome.decision)
                last = outcome.decision
        finally:
            waiter.leave(served)
            if not served and mark is not None:
                with contextlib.suppress(RedisError):
                    await self.store.unwait(pool_id, mark.waiter_id)
        if request_class == "flex":
            raise _flex_refusal(pool_id, last, wait_s)
        retry = last.retry_after_s or 1
        raise AdmissionRefused(
            503,
            retry,
            f"pool {pool_id!r} stayed full for {wait_s:g} s while this request waited"
            f" for {tokens} KV tokens: retry after {retry} s",
        )

    async def _keep_alive(self) -> None:
        """Renew what this process holds until it holds nothing after a renewal."""
        while self._held:
            await asyncio.sleep(self._quota.lease_ttl_s / 3)
            held = list(self._held.values())
            try:
                for start in range(0, len(held), _RENEW_BATCH):
                    await self.store.renew(held[start : start + _RENEW_BATCH], self._quota.lease_ttl_s)
            except RedisError:
                logger.warning("could not renew %d leases; retrying", len(held), exc_info=True)

    def _capacity_changed(self, pool_id: str) -> None:
        if pool_id in self._queues:
            self._queues[pool_id].kick()


def _waits_for_room(request_class: RequestClass, decision: Decision) -> bool:
    """Whether a refusal only says there is no room now: the fleet is full, or for flex (which
    never takes room others want) its share is spent while nothing is idle."""
    if request_class == "flex":
        return decision in (Decision.FLEET_FULL, Decision.REFUSE_TEAM)
    return decision is Decision.FLEET_FULL


def _flex_refusal(pool_id: str, last: ShareDecision, waited_s: float) -> AdmissionRefused:
    """429 for flex: no idle room came within its bounded wait (OpenAI answers flex so). Its
    Retry-After is that wait (at least 1 s), not when the team's leases end: idle room comes and
    goes with other tiers' requests, seconds apart."""
    retry = max(1, math.ceil(waited_s))
    return AdmissionRefused(
        429,
        retry,
        f"no idle capacity for flex in pool {pool_id!r} within {waited_s:g} s: retry after {retry} s, "
        "or send the request at the default tier",
        None,
        last.decision,
        FLEX_CAPACITY_UNAVAILABLE,
    )


def _refusal(decision: ShareDecision) -> AdmissionRefused:
    """The HTTP answer for a refused decision."""
    d = decision.decision
    if d is Decision.TOO_LARGE:
        return AdmissionRefused(413, None, decision.reason, "max_tokens", d)
    status = 503 if d is Decision.FLEET_FULL else 429
    return AdmissionRefused(status, decision.retry_after_s or 1, decision.reason, None, d)
