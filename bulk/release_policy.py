"""What the bulk dispatcher releases next, and how much: room in a pool, the order across
batches, deadline risk and completion rate.

    each tick, per pool:
        RoomPolicy.budget(PoolLoad) ───────▶ tokens and requests bulk may add now (none while
                                             people wait), spent entry by entry
        candidates (one per batch with a ready entry, at_risk from DeadlineRisk)
        ReleaseOrder.pick(candidates) ─────▶ the batch whose head entry goes next

Everything here is plain state and arithmetic: no Redis, no HTTP, no sleeping, the clock is an
argument. The live dispatcher wraps these objects with I/O and the fleet simulator drives the
same objects with a simulated clock, so what the simulator says holds for the code we run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One pool as the dispatcher sees it at one instant."""

    pool_id: str
    capacity_tokens: int  # KV tokens across the pool's ready servers
    leased_tokens: int  # KV leased by admission, every class, every gateway (includes admitted bulk)
    bulk_inflight_tokens: int  # cost of the bulk entries this dispatcher has released and not yet seen end
    bulk_inflight_requests: int
    interactive_waiting: int  # interactive requests queued for room in the pool (any gateway)
    # Interactive requests in the pool's engines, as the servers last reported them: the lease
    # arithmetic cannot tell them apart from bulk whose cost was estimated from a byte bound.
    interactive_running: int = 0
    # People were served in the pool within `RoomPolicy`'s hold (set by `RoomPolicy.note`): a
    # closed loop of chat requests spends much of its time outside the engine, between turns.
    people_recently: bool = False


class RoomPolicy:
    """How many KV tokens of bulk work may be released into a pool now.

    Bulk only fills what people leave idle: nothing while any interactive request waits for
    room, and never the last `reserve_fraction` of the pool, so a burst of interactive traffic
    finds room at once instead of waiting for bulk requests to end.

        capacity ├──── usable = ⌊capacity × (1 − reserve)⌋ ────┼── reserve ──┤
                 ├ interactive ┼ bulk in flight ┼ room ─────────┤

    Memory is not the only thing bulk takes from people: an engine runs only so many bulk
    sequences beside interactive ones, so while people are served (and for `interactive_hold_s`
    after: `note`), bulk in flight is held to `max_inflight_beside_interactive`. More would only
    queue in the engine, and every request costs the gateway and the servers' CPUs something.
    """

    def __init__(
        self,
        reserve_fraction: float,
        max_inflight_requests: int,
        max_inflight_beside_interactive: int | None = None,
        interactive_hold_s: float = 5.0,
    ) -> None:
        if not 0.0 <= reserve_fraction < 1.0:
            raise ValueError(f"reserve_fraction must be in [0, 1), got {reserve_fraction}")
        if max_inflight_requests < 1:
            raise ValueError(f"max_inflight_requests must be at least 1, got {max_inflight_requests}")
        # The reserve as written in the config (0.1 is one tenth, not the nearest double), so
        # 10,000 tokens at 0.1 leave exactly 9,000 usable and the simulator agrees to the token.
        self._usable = 1 - Fraction(repr(reserve_fraction))
        self._max_inflight = max_inflight_requests
        beside = max_inflight_beside_interactive
        self._max_beside = max_inflight_requests if beside is None else min(beside, max_inflight_requests)
        self._hold_s = interactive_hold_s
        self._people_seen_at: dict[str, float] = {}

    def usable_tokens(self, capacity_tokens: int) -> int:
        """The part of a pool bulk may ever share with interactive work."""
        return max(0, capacity_tokens) * self._usable.numerator // self._usable.denominator

    def note(self, pool: PoolLoad, now: float) -> PoolLoad:
        """Remember whether people are served in the pool now; the load with `people_recently`
        set when they were within the last `interactive_hold_s` seconds."""
        if pool.interactive_running > 0 or _interactive_tokens(pool) > 0:
            self._people_seen_at[pool.pool_id] = now
        seen = self._people_seen_at.get(pool.pool_id)
        return replace(pool, people_recently=seen is not None and now - seen < self._hold_s)

    def requests_room(self, pool: PoolLoad) -> int:
        """How many more bulk requests this dispatcher may have in flight in the pool."""
        people = pool.people_recently or pool.interactive_running > 0 or _interactive_tokens(pool) > 0
        limit = self._max_beside if people else self._max_inflight
        return max(0, limit - pool.bulk_inflight_requests)

    def room_tokens(self, pool: PoolLoad) -> int:
        """KV tokens of bulk work that may be released into the pool now (0: release nothing)."""
        if pool.interactive_waiting > 0 or self.requests_room(pool) == 0 or pool.capacity_tokens <= 0:
            return 0
        bulk = max(0, pool.bulk_inflight_tokens)
        return max(0, self.usable_tokens(pool.capacity_tokens) - _interactive_tokens(pool) - bulk)

    def budget(self, pool: PoolLoad) -> RoomBudget:
        """The room of one release pass into the pool (see `RoomBudget`)."""
        return RoomBudget(self.room_tokens(pool), self.requests_room(pool), max(0, pool.bulk_inflight_requests))


@dataclass(slots=True)
class RoomBudget:
    """What one release pass may still put into a pool: the room counted once from the pool's
    load, then spent entry by entry. Entries released in the pass hold no lease yet (admission
    runs after release), so a load read again with them in flight would show the same room."""

    tokens: int  # KV tokens of bulk that may still go (RoomPolicy.room_tokens, less what went)
    requests: int  # bulk requests that may still go (RoomPolicy.requests_room, less what went)
    inflight_requests: int  # bulk requests in flight in the pool, this pass's included

    @property
    def open(self) -> bool:
        """Whether anything may go at all."""
        return self.tokens > 0 and self.requests > 0

    def allows(self, head_cost: int) -> bool:
        """Whether an entry leasing `head_cost` tokens may go now: it fits the room left, or the
        room is open and none of our bulk is in flight in the pool (an entry larger than the
        room must go some time: then it goes alone)."""
        return self.open and (head_cost <= self.tokens or self.inflight_requests == 0)

    def spend(self, tokens: int, requests: int = 1) -> None:
        """An entry of `requests` requests leasing `tokens` went."""
        self.tokens -= tokens
        self.requests -= requests
        self.inflight_requests += requests


def _interactive_tokens(pool: PoolLoad) -> int:
    """Leased tokens that are not this dispatcher's bulk. Our released bulk may or may not hold
    a lease yet (admission runs after release), so it is taken out of the leases and counted
    once, fully, on its own."""
    return max(0, pool.leased_tokens - max(0, pool.bulk_inflight_tokens))


@dataclass(frozen=True, slots=True)
class Candidate:
    """A batch with an entry ready to release."""

    batch_id: str
    team_id: str
    deadline: float  # unix time
    created_at: float
    head_cost: int  # tokens (prompt bound + max_tokens) of the entry that would go next
    at_risk: bool = False


def _edf_key(candidate: Candidate) -> tuple[float, float, str]:
    return candidate.deadline, candidate.created_at, candidate.batch_id


class ReleaseOrder:
    """Which batch releases next: at-risk batches first (earliest deadline), then deficit round robin
    across teams in tokens (quantum × team weight per round), earliest deadline first within a team.

    Deficit round robin shares tokens, not requests, so a team whose entries are long gets no
    more of the pool than its weight says. Teams take turns in sorted id order; the team holding
    the turn releases while its deficit covers its head entry's cost; each time the turn passes a
    team that cannot afford its head, that team's deficit grows by quantum × weight. A team with
    nothing ready (absent from `candidates`) is reset to 0, so credit is not banked while idle
    and a returning team gets no burst. At-risk batches skip the turn but their cost is still
    charged to their team (its deficit may go negative), so a deadline rescue is not free share.

    Keep one ReleaseOrder per pool and pass every batch with an entry ready for it, even one
    whose head does not fit the room now: leaving a team out resets its deficit, and a team
    with long entries would never save up for one. `pick` charges the chosen team, so when the
    head may not fit, `peek` first and `pick` only once it will be released.
    """

    def __init__(self, weights: Mapping[str, float], quantum_tokens: int = 4096) -> None:
        if quantum_tokens < 1:
            raise ValueError(f"quantum_tokens must be at least 1, got {quantum_tokens}")
        for team_id, weight in weights.items():
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"weight of team {team_id!r} must be a positive number, got {weight}")
        self._weights = dict(weights)
        self._quantum = quantum_tokens
        self._deficits: dict[str, float] = {}
        self._turn: str | None = None  # the team holding the turn, or None before the first pick

    def deficits(self) -> dict[str, float]:
        """Each team's deficit in tokens as of the last pick (teams absent then are at 0)."""
        return dict(self._deficits)

    def peek(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """The candidate `pick` would choose, without charging anyone."""
        choice = self._choose(candidates)
        return None if choice is None else choice[0]

    def pick(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """Choose the candidate to release next and charge its cost to its team."""
        choice = self._choose(candidates)
        if choice is None:
            self._deficits = {}  # nobody has work ready: nobody keeps credit
            return None
        chosen, deficits, turn = choice
        self._deficits = deficits
        self._turn = turn
        return chosen

    def _choose(self, candidates: Sequence[Candidate]) -> tuple[Candidate, dict[str, float], str | None] | None:
        """The choice, the deficits after it (teams absent from `candidates` dropped, i.e. reset
        to 0) and the turn after it; touches no state."""
        if not candidates:
            return None
        deficits = {c.team_id: self._deficits.get(c.team_id, 0.0) for c in candidates}
        at_risk = [c for c in candidates if c.at_risk]
        if at_risk:
            chosen = min(at_risk, key=_edf_key)
            deficits[chosen.team_id] -= chosen.head_cost
            return chosen, deficits, self._turn
        heads: dict[str, Candidate] = {}
        for c in candidates:
            if c.team_id not in heads or _edf_key(c) < _edf_key(heads[c.team_id]):
                heads[c.team_id] = c
        order = self._turn_order(sorted(heads))
        # Visits go (round 0: order[0], order[1], ...), (round 1: ...). A team at offset j with
        # deficit d and grant q first affords its head in round k = ⌈(cost − d) / q⌉; the winner is
        # the earliest visit (k, j), found arithmetically so a huge head cost cannot spin a loop.
        grants = {t: self._quantum * self._weights.get(t, 1.0) for t in order}
        rounds = {t: self._rounds_to_afford(deficits[t], heads[t].head_cost, grants[t]) for t in order}
        win_offset = min(range(len(order)), key=lambda j: (rounds[order[j]], j))
        winner = order[win_offset]
        win_round = rounds[winner]
        for offset, team in enumerate(order):
            # Teams before the winner in its round were passed once more than those after it.
            passes = win_round + (1 if offset < win_offset else 0)
            deficits[team] += passes * grants[team]
        deficits[winner] -= heads[winner].head_cost
        return heads[winner], deficits, winner

    def _turn_order(self, teams: list[str]) -> list[str]:
        """Teams in visiting order: the turn holder first, or the team after it if it left."""
        if self._turn is None:
            return teams
        start = next((i for i, t in enumerate(teams) if t >= self._turn), 0)
        return teams[start:] + teams[:start]

    @staticmethod
    def _rounds_to_afford(deficit: float, cost: int, grant: float) -> int:
        """Fewest grants after which `deficit + rounds × grant ≥ cost`, as the same float sum in `_choose`."""
        if deficit >= cost:
            return 0
        rounds = max(1, math.ceil((cost - deficit) / grant))
        # The division may round either way by one; settle on the count the float sum accepts.
        # Bounded: beyond float precision another grant changes nothing, and the estimate stands.
        for _ in range(2):
            if deficit + rounds * grant < cost:
                rounds += 1
            elif rounds > 1 and deficit + (rounds - 1) * grant >= cost:
                rounds -= 1
        return rounds


class DeadlineRisk:
    """A batch is at risk when, at its recent completion rate, its remaining entries would not finish
    before the deadline (with a safety margin).

    With `margin` 0.8 the remaining work must fit in 80% of the time left. Without a rate (a
    batch that has not finished anything yet, or has stalled) there is nothing to extrapolate,
    so the batch is at risk only once less than `min_time_left_s` remains.
    """

    def __init__(self, margin: float = 0.8, min_time_left_s: float = 600.0) -> None:
        if not 0.0 < margin <= 1.0:
            raise ValueError(f"margin must be in (0, 1], got {margin}")
        if min_time_left_s < 0:
            raise ValueError(f"min_time_left_s must not be negative, got {min_time_left_s}")
        self._margin = margin
        self._min_time_left_s = min_time_left_s

    def eta_s(self, remaining: int, rate_per_s: float | None) -> float | None:
        """Seconds until the remaining entries finish at this rate (None: no rate to go by)."""
        if remaining <= 0:
            return 0.0
        if rate_per_s is None or rate_per_s <= 0:
            return None
        return remaining / rate_per_s

    def at_risk(self, remaining: int, rate_per_s: float | None, now: float, deadline: float) -> bool:
        if remaining <= 0:
            return False
        time_left = deadline - now
        eta = self.eta_s(remaining, rate_per_s)
        if eta is None:
            return time_left < self._min_time_left_s
        return eta > self._margin * time_left


class CompletionRate:
    """Entries finished per second over the last `window_s`, from (time, done so far) samples.

    The oldest sample kept is the last one at or before the window's start, so sparse samples
    still give a rate over (about) the whole window. Samples closer together than 1/64 of the
    window are merged into the newest, which bounds memory however often `observe` is called.
    """

    _RESOLUTION = 64  # samples kept per window, at most (plus the anchor and the newest)

    def __init__(self, window_s: float = 300.0) -> None:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be a positive number, got {window_s}")
        self._window_s = window_s
        self._samples: list[tuple[float, int]] = []

    def observe(self, done_total: int, now: float) -> None:
        """Record that `done_total` entries had finished at `now`.

        A sample older than the newest is ignored (a clock step back); a total below the newest
        means the count restarted, so the history is dropped rather than read as negative work.
        """
        samples = self._samples
        if samples and now < samples[-1][0]:
            return
        if samples and done_total < samples[-1][1]:
            samples.clear()
        if len(samples) >= 2 and now - samples[-2][0] < self._window_s / self._RESOLUTION:
            samples[-1] = (now, done_total)
        else:
            samples.append((now, done_total))
        start = now - self._window_s
        drop = 0
        while drop + 1 < len(samples) and samples[drop + 1][0] <= start:
            drop += 1
        del samples[:drop]

    def per_s(self) -> float | None:
        """Entries per second across the samples kept (None until two samples span time)."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        if t1 <= t0:
            return None
        return (n1 - n0) / (t1 - t0)
