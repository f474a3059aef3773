"""Fair-share admission: the decision for one request, from the state of one pool.

A pool's capacity is counted in KV tokens across its ready servers. Every team that currently
wants capacity in the pool (holds leases there, has requests waiting, or is asking now) is
guaranteed `capacity × weight / Σ weights of the teams that want capacity` (its share); idle
teams' shares are spread over the active ones. Only `capacity × weight / Σ weights of every
configured team` (its static share) is the team's own whatever the others do, so room taken
between the two is lent by idle teams. A request of N tokens from team T is:

    T's in use + N ≤ T's share ──┬─ N does not fit beside the owned leases
                                 │  (the fleet shrank) ────────────────────▶ FLEET_FULL (queue)
                                 ├─ T's in use + N ≤ T's static share ─────▶ ADMIT
                                 └─ beyond it ─────────────────────────────▶ BORROW (bulk priority)
    beyond T's share ────────────┬─ N fits in unleased room and no other team
                                 │  is waiting ────────────────────────────▶ BORROW (bulk priority)
                                 └─ otherwise ──────────────────────────────▶ REFUSE_TEAM (429)

Each team's owned leases stay within its static share, and static shares sum to the capacity,
so while the capacity holds, an interactive request within its team's share always fits beside
them: FLEET_FULL for interactive work means servers went away since the leases were taken.

"T's in use" depends on the request (`TeamLoad.counted`): for an interactive request it leaves
out the team's flex and bulk (preemptible leases), which give way to it in the engine, as
anyone's do, so a team's background work never refuses its own people's requests; for a
priority request it is the team's priority leases only, so the tier goes ahead of the team's
default work too (a team may then hold up to its share in each); for flex, all but the team's
bulk (which the engine preempts for flex); for bulk, all of it.

Borrowed leases are the first to go when owners return: an interactive owner is admitted
against room held by borrowers (`capacity − owned`), because borrowed work runs at bulk
priority and the engine preempts bulk before any interactive request waits. A bulk owner is
not (the engine would not preempt bulk for bulk), and bulk is never admitted while interactive
requests wait in the pool. Hard limits (`max_inflight_tokens`, `tokens_per_day`) come first.

`SharePolicy` is pure: no Redis, no clock, so the fleet simulator runs the same object. The
Redis script in `quota.lease_scripts` applies the same rules atomically (in the same order, with
the weights summed in the same team order, so the floating-point comparisons agree bit for
bit); the live path re-runs `decide` on the snapshot the script saw to explain its answer, and
a test feeds random states through both.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class Decision(enum.Enum):
    """What to do with one request. The values are the words the Redis script returns."""

    ADMIT = "admit"  # within the team's share: run at the request's own class
    BORROW = "borrow"  # beyond the share, on idle room: run at bulk priority
    REFUSE_TEAM = "refuse_team"  # beyond the share while others want the room: 429
    REFUSE_LIMIT = "refuse_limit"  # a hard limit of the team (in flight, per day): 429
    FLEET_FULL = "fleet_full"  # within the share but no room in the pool: queue, then 503
    TOO_LARGE = "too_large"  # larger than a hard limit of the team: never admissible

    @property
    def admitted(self) -> bool:
        return self in (Decision.ADMIT, Decision.BORROW)


@dataclass(frozen=True, slots=True)
class TeamLoad:
    """One team's leases and waiters in one pool."""

    owned_tokens: int = 0  # priority and interactive admitted within share
    borrowed_tokens: int = 0  # priority and interactive admitted beyond share, preemptible
    waiters: int = 0  # interactive requests queued for room (any gateway process)
    preemptible_tokens: int = 0  # bulk (within share or beyond): the engine preempts it for every other class
    priority_tokens: int = 0  # priority admitted within share
    flex_tokens: int = 0  # flex (within share or beyond): the engine preempts it for owners

    @property
    def in_use(self) -> int:
        return (
            self.owned_tokens + self.borrowed_tokens + self.preemptible_tokens + self.priority_tokens + self.flex_tokens
        )

    def counted(self, request: ShareRequest) -> int:
        """What counts against the team's share for `request`: a priority request's, its
        team's priority leases (the tier goes ahead of the team's other work); an interactive
        one's, all but the team's flex and bulk, and a flex one's all but its bulk (the engine
        preempts those for it); bulk's, everything."""
        if request.priority:
            return self.priority_tokens
        if request.interactive:
            return self.in_use - self.preemptible_tokens - self.flex_tokens
        if request.flex:
            return self.in_use - self.preemptible_tokens
        return self.in_use

    @property
    def wants_capacity(self) -> bool:
        return self.in_use > 0 or self.waiters > 0


@dataclass(frozen=True, slots=True)
class PoolView:
    """What admission knows of one pool at one instant."""

    pool_id: str
    capacity_tokens: int  # KV tokens across the pool's ready servers
    loads: Mapping[str, TeamLoad]  # teams with leases or waiters; absent teams have neither
    next_lease_end: float | None = None  # soonest expected end of any lease in the pool

    @property
    def owned_tokens(self) -> int:
        """Leased by owners within their shares (interactive and priority): what no owner's
        request may take."""
        return sum(load.owned_tokens + load.priority_tokens for load in self.loads.values())

    @property
    def leased_tokens(self) -> int:
        return sum(load.in_use for load in self.loads.values())

    def waiting_teams(self) -> set[str]:
        return {team for team, load in self.loads.items() if load.waiters > 0}


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """A team's hard limits; None is no limit."""

    max_inflight_tokens: int | None = None
    tokens_per_day: int | None = None


@dataclass(frozen=True, slots=True)
class TeamUsage:
    """The requesting team's own figures, beyond its load in the pool."""

    inflight_tokens: int = 0  # leased across every pool
    tokens_today: int = 0  # prompt + completion tokens metered since 00:00 UTC
    day_ends_at: float = math.inf  # when `tokens_today` starts again from zero
    # The team's leases in this pool as (expected end, tokens), soonest first: when they end,
    # the team's in-use falls, so they say when a refused request is worth retrying.
    lease_ends: Sequence[tuple[float, int]] = ()


@dataclass(frozen=True, slots=True)
class ShareRequest:
    team_id: str
    tokens: int  # prompt + max_tokens: the KV the request may come to hold
    interactive: bool  # an owner's (priority or interactive): not flex or bulk
    priority: bool = False
    flex: bool = False


@dataclass(frozen=True, slots=True)
class ShareDecision:
    """The answer: `retry_after_s` for refusals (whole seconds, at least 1), None otherwise."""

    decision: Decision
    share_tokens: float  # the team's guaranteed share of the pool at this instant
    retry_after_s: int | None
    reason: str  # for the caller's error body: what happened and what to do


class SharePolicy:
    """Decides admissions from the teams' weights and limits (fixed) and a pool's state (given)."""

    def __init__(self, weights: Mapping[str, float], limits: Mapping[str, TeamLimits] | None = None) -> None:
        for team, weight in weights.items():
            if not weight > 0:
                raise ValueError(f"team {team!r}: weight must be positive, got {weight}")
        # Sorted once: the Redis script receives the weights in this order and sums them in it.
        self.weights: dict[str, float] = {team: weights[team] for team in sorted(weights)}
        self.total_weight = 0.0
        for weight in self.weights.values():  # summed in the script's order
            self.total_weight += weight
        self.limits: dict[str, TeamLimits] = dict(limits or {})

    def share_weight(self, team_id: str, pool: PoolView) -> tuple[float, float]:
        """(the team's weight, the total weight of the teams that want capacity, itself included)."""
        total = 0.0
        for team, weight in self.weights.items():  # sorted order, as in the script
            load = pool.loads.get(team)
            if team == team_id or (load is not None and load.wants_capacity):
                total += weight
        return self.weights[team_id], total

    def share_tokens(self, team_id: str, pool: PoolView) -> float:
        weight, total = self.share_weight(team_id, pool)
        return pool.capacity_tokens * weight / total

    def decide(self, request: ShareRequest, pool: PoolView, usage: TeamUsage, now: float) -> ShareDecision:
        """The decision for `request` (team in `self.weights`, tokens > 0) at time `now`."""
        if request.team_id not in self.weights:
            raise ValueError(f"unknown team {request.team_id!r}")
        if request.tokens <= 0:
            raise ValueError(f"a request reserves at least one token, got {request.tokens}")
        team, tokens = request.team_id, request.tokens
        limits = self.limits.get(team, TeamLimits())
        load = pool.loads.get(team, TeamLoad())
        weight, total = self.share_weight(team, pool)
        share = pool.capacity_tokens * weight / total

        def answer(decision: Decision, retry_at: float | None = None) -> ShareDecision:
            retry = None if retry_at is None else max(1, math.ceil(retry_at - now))
            text = _reason(decision, request, pool, share, weight >= total, load, limits, usage, retry)
            return ShareDecision(decision, share, retry, text)

        fallback_at = pool.next_lease_end if pool.next_lease_end is not None else now + 1.0
        day_limit, inflight_limit = limits.tokens_per_day, limits.max_inflight_tokens
        if (day_limit is not None and tokens > day_limit) or (inflight_limit is not None and tokens > inflight_limit):
            return answer(Decision.TOO_LARGE)
        if day_limit is not None and usage.tokens_today + usage.inflight_tokens + tokens > day_limit:
            if usage.tokens_today + tokens > day_limit:
                return answer(Decision.REFUSE_LIMIT, usage.day_ends_at)
            excess = usage.tokens_today + usage.inflight_tokens + tokens - day_limit
            return answer(Decision.REFUSE_LIMIT, _when_freed(usage.lease_ends, excess, fallback_at))
        if inflight_limit is not None and usage.inflight_tokens + tokens > inflight_limit:
            excess = usage.inflight_tokens + tokens - inflight_limit
            return answer(Decision.REFUSE_LIMIT, _when_freed(usage.lease_ends, excess, fallback_at))
        if tokens > pool.capacity_tokens:
            return answer(Decision.FLEET_FULL, fallback_at)
        owned, leased = pool.owned_tokens, pool.leased_tokens
        waiting = pool.waiting_teams()
        if not request.interactive and waiting:
            return answer(Decision.FLEET_FULL, fallback_at)  # interactive waiters go first
        used = load.counted(request)
        if (used + tokens) * total <= pool.capacity_tokens * weight:
            room = pool.capacity_tokens - (owned if request.interactive else leased)
            if tokens > room:
                return answer(Decision.FLEET_FULL, fallback_at)
            # Beyond the share guaranteed over every configured team, the room belongs to idle
            # teams: borrowed, so a team that comes back takes it first (the engine preempts
            # borrowed work, which runs at bulk priority).
            if (used + tokens) * self.total_weight <= pool.capacity_tokens * weight:
                return answer(Decision.ADMIT)
            # Borrowed work runs at bulk priority, which the engine never preempts for bulk:
            # it may only take room no lease holds.
            if leased + tokens <= pool.capacity_tokens:
                return answer(Decision.BORROW)
            return answer(Decision.FLEET_FULL, fallback_at)
        if not (waiting - {team}) and leased + tokens <= pool.capacity_tokens:
            return answer(Decision.BORROW)
        # Beyond the share: retry when enough of the team's own leases have ended for this
        # request to fit its share as it stands now.
        excess_tokens = used + tokens - share
        return answer(Decision.REFUSE_TEAM, _when_freed(usage.lease_ends, excess_tokens, fallback_at))


def _when_freed(lease_ends: Sequence[tuple[float, int]], tokens: float, fallback_at: float) -> float:
    """When the leases, ending in order, will have freed `tokens`; `fallback_at` if they never do."""
    freed = 0
    for ends_at, lease_tokens in lease_ends:
        freed += lease_tokens
        if freed >= tokens:
            return ends_at
    return max((end for end, _ in lease_ends), default=fallback_at) if freed else fallback_at


def _reason(
    decision: Decision,
    request: ShareRequest,
    pool: PoolView,
    share: float,
    alone: bool,
    load: TeamLoad,
    limits: TeamLimits,
    usage: TeamUsage,
    retry_after_s: int | None,
) -> str:
    """The sentence an error body carries: what the numbers were and what the caller can do.
    `alone`: no other team wants capacity in the pool (the share is all of it)."""
    team, tokens, capacity = request.team_id, request.tokens, pool.capacity_tokens
    held = load.counted(request)  # what counts against the share
    retry = f"retry after {retry_after_s} s" if retry_after_s is not None else ""
    if decision is Decision.ADMIT:
        return f"team {team!r} is within its share of pool {pool.pool_id!r} ({held + tokens} of {share:.0f} tokens)"
    if decision is Decision.BORROW:
        return (
            f"team {team!r} is beyond its share of pool {pool.pool_id!r} ({share:.0f} tokens) and borrows idle room:"
            " the request runs at bulk priority and is the first preempted when other teams return"
        )
    if decision is Decision.TOO_LARGE:
        day, inflight = limits.tokens_per_day, limits.max_inflight_tokens
        limit = f"tokens_per_day is {day}" if day is not None and tokens > day else f"max_inflight_tokens is {inflight}"
        return (
            f"the request needs {tokens} KV tokens (prompt + max_tokens) but team {team!r}'s {limit}:"
            " lower max_tokens or shorten the prompt"
        )
    if decision is Decision.REFUSE_LIMIT:
        day = limits.tokens_per_day
        if day is not None and usage.tokens_today + usage.inflight_tokens + tokens > day:
            return (
                f"team {team!r} has used {usage.tokens_today} and holds {usage.inflight_tokens} in flight of its"
                f" {day} tokens per day; this request needs {tokens}: {retry}"
            )
        return (
            f"team {team!r} holds {usage.inflight_tokens} KV tokens in flight, its limit is"
            f" {limits.max_inflight_tokens}; this request needs {tokens}: {retry}, when earlier requests end,"
            " or lower max_tokens"
        )
    if decision is Decision.REFUSE_TEAM:
        if alone:  # the team's own leases fill the pool
            return (
                f"team {team!r} holds {held} of the {capacity} KV tokens of pool {pool.pool_id!r}, and this"
                f" request needs {tokens} more: {retry}, when the team's earlier requests end, or lower max_tokens"
            )
        return (
            f"team {team!r} holds {held} KV tokens in pool {pool.pool_id!r}; its share is {share:.0f}"
            f" while other teams want capacity, and this request needs {tokens} more: {retry}, or lower max_tokens"
        )
    if capacity == 0:
        return f"pool {pool.pool_id!r} has no ready servers: {retry}"
    if tokens > capacity:
        return (
            f"pool {pool.pool_id!r}'s ready servers hold {capacity} KV tokens, fewer than this request's {tokens}:"
            f" {retry} when more servers are ready, or lower max_tokens"
        )
    if not request.interactive and pool.waiting_teams():
        return f"interactive requests are waiting for room in pool {pool.pool_id!r}; bulk work waits: {retry}"
    return f"pool {pool.pool_id!r} has no free KV capacity ({capacity} tokens, all leased): {retry}"
