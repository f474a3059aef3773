"""Admission as the gateway does it: `SharePolicy.decide` on the pool's leases, the leases held
here instead of in Redis.

Each admitted request holds a lease of prompt + max_tokens until it ends; interactive requests
the pool has no room for wait (they count as the pool's waiters) and are retried until the
gateway's queue timeout.
"""

from __future__ import annotations

from collections import defaultdict

from quota.shares import Decision, PoolView, SharePolicy, ShareRequest, TeamLoad, TeamUsage


class TeamLeases:
    """Owned and borrowed lease tokens and waiters per team, in one pool."""

    def __init__(self, policy: SharePolicy, pool_id: str) -> None:
        self.policy = policy
        self.pool_id = pool_id
        self.owned: dict[str, int] = defaultdict(int)
        self.borrowed: dict[str, int] = defaultdict(int)
        self.waiters: dict[str, int] = defaultdict(int)
        self.leased_tokens = 0
        self.interactive_leased_tokens = 0

    def view(self, capacity_tokens: int) -> PoolView:
        teams = set(self.owned) | set(self.borrowed) | set(self.waiters)
        loads = {
            t: TeamLoad(self.owned[t], self.borrowed[t], self.waiters[t])
            for t in sorted(teams)
            if self.owned[t] or self.borrowed[t] or self.waiters[t]
        }
        return PoolView(self.pool_id, capacity_tokens, loads)

    def decide(self, team_id: str, tokens: int, interactive: bool, capacity_tokens: int, now: float) -> Decision:
        """The policy's answer for a request of `tokens`; takes the lease when it admits."""
        request = ShareRequest(team_id=team_id, tokens=tokens, interactive=interactive)
        usage = TeamUsage(inflight_tokens=self.owned[team_id] + self.borrowed[team_id])
        decision = self.policy.decide(request, self.view(capacity_tokens), usage, now).decision
        if decision.admitted:
            self.take(team_id, tokens, borrowed=decision is Decision.BORROW, interactive=interactive)
        return decision

    def take(self, team_id: str, tokens: int, *, borrowed: bool, interactive: bool) -> None:
        (self.borrowed if borrowed else self.owned)[team_id] += tokens
        self.leased_tokens += tokens
        if interactive:
            self.interactive_leased_tokens += tokens

    def release(self, team_id: str, tokens: int, *, borrowed: bool, interactive: bool) -> None:
        (self.borrowed if borrowed else self.owned)[team_id] -= tokens
        self.leased_tokens -= tokens
        if interactive:
            self.interactive_leased_tokens -= tokens

    @property
    def num_waiters(self) -> int:
        return sum(self.waiters.values())
