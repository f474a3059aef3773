"""Admission as the gateway does it: `SharePolicy.decide` on the pool's leases, the leases held
here instead of in Redis; and flex's rule beside it.

Each admitted request holds a lease of prompt + max_tokens until it ends; priority and
interactive requests the pool has no room for wait (they count as the pool's waiters) and are
retried until the gateway's queue timeout.

Flex runs only on room the higher tiers leave (contracts/service_tier.py): it is admitted
while no priority or interactive request waits and every lease with its own stays within what
bulk may ever use of the pool (the bulk reserve is the higher tiers' too). It outranks bulk
there by the dispatcher's own rule: bulk is released only while nobody waits, flex included,
so room bulk's requests leave as they end goes to waiting flex first. Counting bulk's leases
too is a choice: a first version let flex in on top of them (bulk's KV is flex's to take,
`PREEMPTS`), and the engines, leased over their KV, preempted so much (flex growing a block
preempted people on borrowed room, which run in the engine's bulk class) that the default
tier's chat-sized TTFT p99 through a surge went from 0.9 s to 3.3 s (exact, 4 GPUs).
Flex leases are held apart from the teams' shares, so the share policy admits people against
room flex holds (the engine takes it back from flex), and a team's flex never pushes its own
people to borrowed room; the dispatcher counts them as leased.
"""

from __future__ import annotations

from collections import defaultdict

from bulk.release_policy import RoomPolicy
from quota.shares import Decision, PoolView, SharePolicy, ShareRequest, TeamLoad, TeamUsage


class TeamLeases:
    """Owned, priority and borrowed lease tokens and waiters per team, in one pool. Priority
    leases within a team's share are a kind of their own, as the live leases keep them
    (quota/shares.py: a priority request counts only its team's priority leases)."""

    def __init__(self, policy: SharePolicy, pool_id: str, room: RoomPolicy) -> None:
        self.policy = policy
        self.pool_id = pool_id
        self.room = room  # the dispatcher's reserve arithmetic, which flex keeps to as well
        self.owned: dict[str, int] = defaultdict(int)
        self.borrowed: dict[str, int] = defaultdict(int)
        self.priority: dict[str, int] = defaultdict(int)
        self.waiters: dict[str, int] = defaultdict(int)
        self.leased_tokens = 0  # every lease, flex's included (what the dispatcher sees)
        self.interactive_leased_tokens = 0  # priority and interactive, borrowed included
        self.flex_leased_tokens = 0

    def view(self, capacity_tokens: int) -> PoolView:
        teams = set(self.owned) | set(self.borrowed) | set(self.waiters) | set(self.priority)
        loads = {
            t: TeamLoad(self.owned[t], self.borrowed[t], self.waiters[t], priority_tokens=self.priority[t])
            for t in sorted(teams)
            if self.owned[t] or self.borrowed[t] or self.waiters[t] or self.priority[t]
        }
        return PoolView(self.pool_id, capacity_tokens, loads)

    def decide(
        self, team_id: str, tokens: int, interactive: bool, capacity_tokens: int, now: float, *, priority: bool = False
    ) -> Decision:
        """The policy's answer for a request of `tokens`; takes the lease when it admits."""
        request = ShareRequest(team_id=team_id, tokens=tokens, interactive=interactive, priority=priority)
        usage = TeamUsage(inflight_tokens=self.owned[team_id] + self.borrowed[team_id] + self.priority[team_id])
        decision = self.policy.decide(request, self.view(capacity_tokens), usage, now).decision
        if decision.admitted:
            borrowed = decision is Decision.BORROW
            self.take(team_id, tokens, borrowed=borrowed, interactive=interactive, priority=priority)
        return decision

    def _kind(self, *, borrowed: bool, priority: bool) -> dict[str, int]:
        return self.borrowed if borrowed else self.priority if priority else self.owned

    def take(self, team_id: str, tokens: int, *, borrowed: bool, interactive: bool, priority: bool = False) -> None:
        self._kind(borrowed=borrowed, priority=priority)[team_id] += tokens
        self.leased_tokens += tokens
        if interactive:
            self.interactive_leased_tokens += tokens

    def release(self, team_id: str, tokens: int, *, borrowed: bool, interactive: bool, priority: bool = False) -> None:
        self._kind(borrowed=borrowed, priority=priority)[team_id] -= tokens
        self.leased_tokens -= tokens
        if interactive:
            self.interactive_leased_tokens -= tokens

    @property
    def num_waiters(self) -> int:
        return sum(self.waiters.values())

    def flex_room(self, capacity_tokens: int) -> int:
        """Lease tokens flex may still take: the room the higher tiers leave (module docstring);
        the caller checks that none of theirs waits."""
        return self.room.usable_tokens(capacity_tokens) - self.leased_tokens

    def flex_fits(self, tokens: int, capacity_tokens: int) -> bool:
        return tokens <= self.flex_room(capacity_tokens)

    def take_flex(self, tokens: int) -> None:
        self.flex_leased_tokens += tokens
        self.leased_tokens += tokens

    def release_flex(self, tokens: int) -> None:
        self.flex_leased_tokens -= tokens
        self.leased_tokens -= tokens
