"""Leases of KV tokens in Redis: what every gateway process has admitted, and until when.

A lease is a reservation of a request's worst-case KV (prompt + max_tokens) in one pool. It
expires `ttl_s` after it was taken or last renewed; the gateway renews it while the request
runs and releases it when the request ends. Expired leases are reclaimed lazily, inside the
same scripts that reserve and release (`quota.lease_scripts`), so a gateway killed with
SIGKILL leaks nothing after the TTL.

How the share decision and the script relate: `SharePolicy` (pure) is the definition; the
`reserve` script applies the same rules to the state it reads, in one atomic step, with the
pool's capacity and the teams' weights and limits passed in as arguments. It returns the
decision and the exact state it decided on; `reserve` then runs `SharePolicy.decide` on that
state to write the refusal's reason and Retry-After, and logs an error if the two ever
disagree (the script's answer stands: it has already been applied).

Times are epoch seconds from the store's clock, passed into the scripts (so tests can drive
them): the gateways' clocks must agree to well within the lease TTL (NTP does).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import redis.asyncio

from config.replica_acks import ReplicaAcks
from config.script_runner import ScriptRunner
from quota import lease_scripts
from quota.shares import Decision, PoolView, ShareDecision, SharePolicy, ShareRequest, TeamLimits, TeamLoad, TeamUsage
from quota.usage import day_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lease:
    """KV tokens reserved for one request. `borrowed`: beyond the team's share, so the request
    is sent at bulk priority (the first the engine preempts); `preemptible`: for a class the
    engine preempts for priority and interactive work (flex, bulk), so those count none of it
    against their team's share."""

    lease_id: str
    team_id: str
    pool_id: str
    tokens: int
    borrowed: bool
    expires_at: float
    preemptible: bool = False

    priority: bool = False  # a priority request's lease within share
    flex: bool = False  # a flex request's (preemptible too)

    @property
    def kind(self) -> int:
        """The lease scripts' word for it: 0 owned, 1 borrowed, 2 bulk, 3 priority, 4 flex."""
        return 4 if self.flex else 2 if self.preemptible else 1 if self.borrowed else 3 if self.priority else 0


@dataclass(frozen=True, slots=True)
class WaiterMark:
    """A queued interactive request, visible to every gateway until `deadline` (so other teams
    stop borrowing the room it waits for)."""

    waiter_id: str
    deadline: float


@dataclass(frozen=True, slots=True)
class ReserveOutcome:
    """What `reserve` did: the decision, the lease when admitted, and the state decided on."""

    decision: ShareDecision
    lease: Lease | None
    pool: PoolView
    usage: TeamUsage


class LeaseStore:
    """Reserve, renew and release leases atomically, for any number of gateway processes."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        policy: SharePolicy,
        clock: Callable[[], float] = time.time,
        prefix: str = "sy:",
        scripts: ScriptRunner | None = None,
    ) -> None:
        """`scripts` runs the lease scripts (one at a time by default; a gateway worker passes
        its `BatchedScripts`, config/batched_scripts.py)."""
        self.policy = policy
        self._client = client
        self._scripts: ScriptRunner = scripts if scripts is not None else ReplicaAcks(0, 1)
        self._clock = clock
        self._prefix = prefix
        self._reserve = client.register_script(lease_scripts.RESERVE)
        self._renew_many = client.register_script(lease_scripts.RENEW_MANY)
        self._release = client.register_script(lease_scripts.RELEASE)
        self._unwait = client.register_script(lease_scripts.UNWAIT)
        self._loads = client.register_script(lease_scripts.LOADS)
        # Sorted once, in the order SharePolicy sums them.
        self._weight_args = [arg for team, w in policy.weights.items() for arg in (team, repr(float(w)))]

    async def reserve(
        self,
        team_id: str,
        pool_id: str,
        tokens: int,
        ttl_s: float,
        *,
        capacity_tokens: int,
        interactive: bool = True,
        priority: bool = False,
        flex: bool = False,
        expected_s: float | None = None,
        waiter: WaiterMark | None = None,
    ) -> ReserveOutcome:
        """Decide and, when admitted, record a lease, in one atomic step.

        `expected_s` is how long the request is expected to run (its leases' expected ends
        give a refused team its Retry-After); the TTL when unknown. With `waiter`, a FLEET_FULL
        answer marks the team as waiting until `waiter.deadline`, and an admission or any
        other refusal clears that mark."""
        priority, flex = priority and interactive, flex and not interactive
        request = ShareRequest(team_id, tokens, interactive, priority, flex)
        if team_id not in self.policy.weights:
            raise ValueError(f"unknown team {team_id!r}")
        if tokens <= 0 or ttl_s <= 0:
            raise ValueError(f"a lease needs tokens > 0 and ttl_s > 0, got {tokens} and {ttl_s}")
        now = self._clock()
        limits = self.policy.limits.get(team_id, TeamLimits())
        today = datetime.fromtimestamp(now, UTC)
        day_ends_at = (today.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()
        lease_id = uuid.uuid4().hex
        expires_at = now + ttl_s
        raw = await self._scripts.run(
            self._client,
            self._reserve,
            [],
            [
                self._prefix,
                repr(now),
                pool_id,
                team_id,
                tokens,
                lease_id,
                repr(expires_at),
                repr(now + (ttl_s if expected_s is None else expected_s)),
                capacity_tokens,
                "2" if priority else "1" if interactive else "3" if flex else "0",
                _optional(limits.max_inflight_tokens),
                _optional(limits.tokens_per_day),
                day_key(team_id, today),
                waiter.waiter_id if waiter else "",
                repr(waiter.deadline) if waiter else "0",
                *self._weight_args,
            ],
        )
        state = json.loads(_text(raw))
        pool = PoolView(pool_id, capacity_tokens, _loads(state["loads"]), state.get("next_end"))
        ends = state["ends"] if isinstance(state["ends"], list) else []
        usage = TeamUsage(
            inflight_tokens=int(state["inflight"]),
            tokens_today=int(state["today"]),
            day_ends_at=day_ends_at,
            lease_ends=tuple((float(end), int(n)) for end, n in ends),
        )
        applied = Decision(state["d"])
        decision = self.policy.decide(request, pool, usage, now)
        if decision.decision is not applied:
            logger.error(
                "admission script and SharePolicy disagree: script %s, policy %s (%s)",
                applied.value,
                decision.decision.value,
                decision.reason,
            )
            decision = replace(decision, decision=applied, retry_after_s=decision.retry_after_s or 1)
        lease = None
        if applied.admitted:
            borrowed = applied is Decision.BORROW
            lease = Lease(
                lease_id, team_id, pool_id, tokens, borrowed, expires_at,
                preemptible=not interactive, priority=priority and not borrowed, flex=flex,
            )  # fmt: skip
        return ReserveOutcome(decision, lease, pool, usage)

    async def renew(self, leases: Sequence[Lease], ttl_s: float) -> None:
        """Push the leases' expiry to now + `ttl_s`, in one call. A lease already reclaimed
        (its holder stalled past the TTL) is recorded again: its request still holds KV."""
        if not leases:
            return
        now = self._clock()
        args: list[str | int] = [self._prefix, repr(now), repr(now + ttl_s)]
        for lease in leases:
            args += [lease.lease_id, lease.pool_id, lease.team_id, lease.tokens, str(lease.kind)]
        restored = await self._scripts.run(self._client, self._renew_many, [], args)
        if restored:  # one line per renewal, not per lease: a late renewal may restore thousands
            logger.warning(
                "%d leases had expired while in use (their renewal came late); recorded again, e.g. %s",
                len(restored), _text(restored[0]),
            )  # fmt: skip

    async def release(self, lease: Lease) -> bool:
        """Return the lease's tokens to the pool. Idempotent: False when it was already gone
        (released before, or reclaimed after expiring)."""
        args = [self._prefix, repr(self._clock()), lease.lease_id, lease.pool_id]
        released = await self._scripts.run(self._client, self._release, [], args)
        return bool(int(released))

    async def unwait(self, pool_id: str, waiter_id: str) -> None:
        """Clear a queued request's waiting mark (it timed out or was cancelled)."""
        await self._scripts.run(self._client, self._unwait, [], [self._prefix, repr(self._clock()), pool_id, waiter_id])

    async def loads(self, pool_id: str) -> dict[str, TeamLoad]:
        """Each team's leases and waiters in the pool, after reclaiming expired ones."""
        state = json.loads(_text(await self._loads(args=[self._prefix, repr(self._clock()), pool_id])))
        return _loads(state["loads"])

    async def in_use(self, pool_id: str) -> dict[str, int]:
        """Tokens leased in the pool per team (every kind), after reclaiming expired ones."""
        return {team: load.in_use for team, load in (await self.loads(pool_id)).items() if load.in_use}


def _loads(raw: object) -> dict[str, TeamLoad]:
    if not isinstance(raw, dict):  # cjson writes an empty table as {} or []
        return {}
    return {team: TeamLoad(int(o), int(b), int(w), int(p), int(q), int(f)) for team, (o, b, w, p, q, f) in raw.items()}


def _optional(limit: int | None) -> str | int:
    return "" if limit is None else limit


def _text(raw: bytes | str | int) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
