"""SharePolicy: exact decisions for three teams of weights 1, 3 and 4 on an 8,000-token pool
(static shares 1,000, 3,000 and 4,000)."""

from __future__ import annotations

import random

import pytest

from quota.shares import Decision, PoolView, SharePolicy, ShareRequest, TeamLimits, TeamLoad, TeamUsage

NOW = 1_000.0
WEIGHTS = {"a": 1.0, "b": 3.0, "c": 4.0}
POLICY = SharePolicy(WEIGHTS)


def pool(capacity: int = 8000, next_end: float | None = None, **loads: TeamLoad) -> PoolView:
    return PoolView("small", capacity, loads, next_end)


def decide(
    team: str,
    tokens: int,
    view: PoolView,
    usage: TeamUsage | None = None,
    interactive: bool = True,
    policy: SharePolicy = POLICY,
) -> tuple[Decision, int | None]:
    result = policy.decide(ShareRequest(team, tokens, interactive), view, usage or TeamUsage(), NOW)
    return result.decision, result.retry_after_s


def test_shares_split_capacity_by_weight_among_teams_that_want_capacity() -> None:
    everyone = pool(a=TeamLoad(1), b=TeamLoad(1), c=TeamLoad(waiters=1))
    assert [POLICY.share_tokens(t, everyone) for t in "abc"] == [1000.0, 3000.0, 4000.0]
    b_idle = pool(a=TeamLoad(1), c=TeamLoad(borrowed_tokens=5))
    assert POLICY.share_tokens("a", b_idle) == 1600.0
    assert POLICY.share_tokens("c", b_idle) == 6400.0
    # The asking team always counts; alone, it is guaranteed the whole pool.
    assert POLICY.share_tokens("b", pool()) == 8000.0
    assert POLICY.share_tokens("b", pool(a=TeamLoad(5))) == 6000.0


def test_within_share_is_admitted_up_to_the_share_exactly() -> None:
    view = pool(a=TeamLoad(500), b=TeamLoad(100), c=TeamLoad(waiters=2))
    assert decide("a", 500, view) == (Decision.ADMIT, None)
    assert decide("a", 501, view)[0] is Decision.REFUSE_TEAM
    assert decide("b", 2900, view) == (Decision.ADMIT, None)


def test_beyond_share_borrows_idle_room_when_no_other_team_waits() -> None:
    view = pool(a=TeamLoad(900), b=TeamLoad(1000), c=TeamLoad(1000))
    result = POLICY.decide(ShareRequest("a", 200, True), view, TeamUsage(), NOW)
    assert (result.decision, result.share_tokens, result.retry_after_s) == (Decision.BORROW, 1000.0, None)
    assert "bulk priority" in result.reason
    # The team's own waiters do not stop it borrowing; another team's do.
    b, c = TeamLoad(1000), TeamLoad(1000)
    assert decide("a", 200, pool(a=TeamLoad(900, waiters=3), b=b, c=c))[0] is Decision.BORROW
    assert decide("a", 200, pool(a=TeamLoad(900), b=TeamLoad(1000, waiters=1), c=c))[0] is Decision.REFUSE_TEAM
    # Borrowing needs room that no lease holds, borrowed ones included.
    full = pool(a=TeamLoad(900, 5000), b=b, c=c)
    assert decide("a", 101, full)[0] is Decision.REFUSE_TEAM
    assert decide("a", 100, full)[0] is Decision.BORROW


def test_refused_team_retries_when_its_own_leases_have_freed_enough() -> None:
    view = pool(a=TeamLoad(900), b=TeamLoad(10), c=TeamLoad(waiters=1), next_end=NOW + 1)
    usage = TeamUsage(inflight_tokens=900, lease_ends=((NOW + 3.0, 400), (NOW + 6.2, 500)))
    assert decide("a", 200, view, usage) == (Decision.REFUSE_TEAM, 3)  # 100 over: the first lease does
    assert decide("a", 600, view, usage) == (Decision.REFUSE_TEAM, 7)  # 500 over: both, ceil(6.2)
    assert decide("a", 1200, view, usage) == (Decision.REFUSE_TEAM, 7)  # never fits: after all of them
    # No leases of its own (one request above its whole share): the pool's next lease end.
    assert decide("a", 1100, pool(b=TeamLoad(10), c=TeamLoad(waiters=1), next_end=NOW + 4.5)) == (
        Decision.REFUSE_TEAM,
        5,
    )
    # Retry-After is whole seconds and at least one, even for a lease already overdue.
    overdue = TeamUsage(inflight_tokens=900, lease_ends=((NOW - 2.0, 900),))
    result = POLICY.decide(ShareRequest("a", 200, True), view, overdue, NOW)
    assert result.retry_after_s == 1
    assert "retry after 1 s" in result.reason and "share is 1000" in result.reason


def test_a_team_alone_borrows_beyond_its_static_share() -> None:
    # Alone, a's share is the whole pool, but only 8,000 x 1/8 is its own: the rest is lent.
    view = pool(a=TeamLoad(900))
    assert POLICY.share_tokens("a", view) == 8000.0
    assert decide("a", 100, view) == (Decision.ADMIT, None)
    result = POLICY.decide(ShareRequest("a", 101, True), view, TeamUsage(), NOW)
    assert (result.decision, result.share_tokens, result.retry_after_s) == (Decision.BORROW, 8000.0, None)
    assert decide("a", 7100, view) == (Decision.BORROW, None)  # up to its whole share
    alone_full = POLICY.decide(ShareRequest("a", 7101, True), view, TeamUsage(), NOW)
    assert alone_full.decision is Decision.REFUSE_TEAM  # beyond it, and no unleased room
    # The reason says the team's own leases fill the pool, not that other teams want it.
    assert "holds 900 of the 8000 KV tokens of pool 'small'" in alone_full.reason
    assert "other teams" not in alone_full.reason
    # Also where the share (capacity x weight / weight) rounds below the capacity in floats.
    odd = SharePolicy({"x": 0.7})
    odd_full = odd.decide(ShareRequest("x", 20, True), pool(29, x=TeamLoad(10)), TeamUsage(), NOW)
    assert odd_full.decision is Decision.REFUSE_TEAM and odd_full.share_tokens < 29
    assert "holds 10 of the 29 KV tokens" in odd_full.reason and "other teams" not in odd_full.reason
    assert decide("a", 101, view, interactive=False) == (Decision.BORROW, None)
    assert decide("c", 4000, pool()) == (Decision.ADMIT, None)
    assert decide("c", 4001, pool()) == (Decision.BORROW, None)


def test_within_share_beyond_static_share_borrows_even_while_others_wait() -> None:
    # Beside c (b idle) a's share is 1,600: the 600 above its static 1,000 are b's, lent. A
    # request within the share is not refused because c waits; beyond the share it is.
    view = pool(a=TeamLoad(1000), c=TeamLoad(100, waiters=1))
    assert POLICY.share_tokens("a", view) == 1600.0
    assert decide("a", 600, view) == (Decision.BORROW, None)
    assert decide("a", 601, view)[0] is Decision.REFUSE_TEAM


def test_fleet_full_when_within_share_but_owned_leases_fill_the_pool() -> None:
    # a and c took their static shares (1,000 and 4,000, owned) of 8,000; then servers went and
    # 5,500 are left. b returns within its share, 5,500 x 3/8.
    view = pool(capacity=5500, next_end=NOW + 2.5, a=TeamLoad(1000), c=TeamLoad(4000))
    assert POLICY.share_tokens("b", view) == 2062.5
    assert decide("b", 500, view) == (Decision.ADMIT, None)
    assert decide("b", 501, view) == (Decision.FLEET_FULL, 3)
    # a itself is now over its 687.5 share and b wants capacity: a is refused, b is not.
    waiting = pool(capacity=5500, a=TeamLoad(1000), b=TeamLoad(waiters=1), c=TeamLoad(4000))
    assert decide("a", 1, waiting)[0] is Decision.REFUSE_TEAM


@pytest.mark.parametrize("weights", [WEIGHTS, {"a": 0.1, "b": 0.2, "c": 0.3}, {"a": 5.0, "b": 1.0, "c": 1.0}])
def test_at_a_fixed_capacity_interactive_work_within_its_share_always_fits(weights: dict[str, float]) -> None:
    """Owned leases stay within static shares, which sum to the capacity: an interactive request
    within its team's static share is never FLEET_FULL unless servers went away. (Beyond it the
    request may only borrow unleased room, so it can be FLEET_FULL: borrowed work runs at bulk
    priority and must not over-commit the pool.)"""
    rng = random.Random(11)
    policy = SharePolicy(weights)
    leases: list[tuple[str, int, bool]] = []  # (team, tokens, borrowed)
    seen = set()
    for _ in range(3000):
        if leases and rng.random() < 0.4:
            leases.pop(rng.randrange(len(leases)))
            continue
        loads = {
            t: TeamLoad(sum(n for u, n, b in leases if u == t and not b), sum(n for u, n, b in leases if u == t and b))
            for t in weights
        }
        view = PoolView("small", 8000, {t: load for t, load in loads.items() if load.in_use})
        team, tokens, interactive = rng.choice(sorted(weights)), rng.randint(1, 2500), rng.random() < 0.7
        decision = policy.decide(ShareRequest(team, tokens, interactive), view, TeamUsage(), NOW).decision
        in_use = sum(n for u, n, _ in leases if u == team)
        within_static = (in_use + tokens) * policy.total_weight <= 8000 * weights[team]
        assert not (interactive and within_static and decision is Decision.FLEET_FULL)
        leased = sum(n for _, n, _ in leases)
        assert not (decision is Decision.BORROW and leased + tokens > 8000)  # never over-committed
        seen.add(decision)
        if decision.admitted:
            leases.append((team, tokens, decision is Decision.BORROW))
    assert seen == {Decision.ADMIT, Decision.BORROW, Decision.REFUSE_TEAM, Decision.FLEET_FULL}


def test_interactive_owners_take_room_held_by_borrowers_but_bulk_owners_do_not() -> None:
    view = pool(a=TeamLoad(1000, 6500), next_end=NOW + 9)
    assert decide("b", 1000, view) == (Decision.ADMIT, None)  # the engine preempts a's borrowed bulk work
    assert decide("b", 1000, view, interactive=False) == (Decision.FLEET_FULL, 9)
    assert decide("b", 500, view, interactive=False) == (Decision.ADMIT, None)
    # a flooded alone (its static 1,000 owned, the rest borrowed): b's whole static share is its own.
    flooded = pool(a=TeamLoad(1000, 7000))
    assert decide("b", 3000, flooded) == (Decision.ADMIT, None)
    assert decide("c", 4000, flooded) == (Decision.ADMIT, None)
    assert decide("b", 1, flooded, interactive=False)[0] is Decision.FLEET_FULL


def test_bulk_waits_while_interactive_requests_wait() -> None:
    view = pool(a=TeamLoad(100), c=TeamLoad(waiters=1))
    assert decide("b", 100, view, interactive=False)[0] is Decision.FLEET_FULL
    assert decide("b", 100, view, interactive=True)[0] is Decision.ADMIT


def test_fleet_full_when_the_pool_has_no_servers_or_is_smaller_than_the_request() -> None:
    result = POLICY.decide(ShareRequest("a", 10, True), pool(capacity=0), TeamUsage(), NOW)
    assert (result.decision, result.retry_after_s) == (Decision.FLEET_FULL, 1)
    assert "no ready servers" in result.reason
    assert decide("c", 8001, pool(next_end=NOW + 12))[0] is Decision.FLEET_FULL


def test_hard_limits_come_before_shares() -> None:
    policy = SharePolicy(WEIGHTS, {"a": TeamLimits(max_inflight_tokens=2000, tokens_per_day=10_000)})
    # a holds 800 here (within its static 1,000) and 1,800 in flight across every pool.
    view = pool(a=TeamLoad(800), next_end=NOW + 30)
    in_flight = TeamUsage(inflight_tokens=1800, lease_ends=((NOW + 4, 300), (NOW + 8, 1500)))
    assert decide("a", 200, view, in_flight, policy=policy) == (Decision.ADMIT, None)
    assert decide("a", 500, view, in_flight, policy=policy) == (Decision.REFUSE_LIMIT, 4)
    assert decide("a", 600, view, in_flight, policy=policy) == (Decision.REFUSE_LIMIT, 8)
    assert decide("a", 2001, pool(), policy=policy) == (Decision.TOO_LARGE, None)
    # Per day: metered usage plus what is in flight; the day's end when usage alone is over.
    day = TeamUsage(tokens_today=9800, day_ends_at=NOW + 3600.5)
    assert decide("a", 300, pool(), day, policy=policy) == (Decision.REFUSE_LIMIT, 3601)
    busy_day = TeamUsage(inflight_tokens=900, tokens_today=9000, day_ends_at=NOW + 3600, lease_ends=((NOW + 2, 900),))
    result = policy.decide(ShareRequest("a", 300, True), view, busy_day, NOW)
    assert (result.decision, result.retry_after_s) == (Decision.REFUSE_LIMIT, 2)
    assert "10000 tokens per day" in result.reason
    assert decide("a", 10_001, pool(), policy=SharePolicy(WEIGHTS, {"a": TeamLimits(tokens_per_day=10_000)}))[0] is (
        Decision.TOO_LARGE
    )
    # Another team's limits are its own.
    assert decide("b", 2500, pool(), policy=policy) == (Decision.ADMIT, None)


def test_bad_inputs_are_refused_with_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown team"):
        POLICY.decide(ShareRequest("z", 1, True), pool(), TeamUsage(), NOW)
    with pytest.raises(ValueError, match="at least one token"):
        POLICY.decide(ShareRequest("a", 0, True), pool(), TeamUsage(), NOW)
    with pytest.raises(ValueError, match="weight must be positive"):
        SharePolicy({"a": 0.0})
