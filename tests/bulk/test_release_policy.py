"""Release policy: exact room maths, deficit round robin shares, deadline risk and completion rate."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from bulk.release_policy import (
    Candidate,
    CompletionRate,
    DeadlineRisk,
    PoolLoad,
    ReleaseOrder,
    RoomBudget,
    RoomPolicy,
)

NOW = 1_000_000.0
HOUR = 3600.0


def load(
    capacity: int = 10_000, leased: int = 0, bulk_tokens: int = 0, bulk_requests: int = 0, waiting: int = 0
) -> PoolLoad:
    return PoolLoad("small", capacity, leased, bulk_tokens, bulk_requests, waiting)


def cand(
    batch: str, team: str, cost: int = 1000, deadline: float = NOW + HOUR, created: float = NOW, at_risk: bool = False
) -> Candidate:
    return Candidate(batch, team, deadline, created, cost, at_risk)


# --- RoomPolicy ---------------------------------------------------------------------------------


def test_room_leaves_the_reserve_and_shrinks_as_interactive_load_rises() -> None:
    policy = RoomPolicy(reserve_fraction=0.2, max_inflight_requests=8)
    assert policy.room_tokens(load()) == 8000
    assert policy.room_tokens(load(leased=3000)) == 5000
    assert policy.room_tokens(load(leased=7900)) == 100
    # Interactive alone already past the usable part: no room, never negative.
    assert policy.room_tokens(load(leased=9500)) == 0


def test_reserve_is_taken_as_written_not_as_the_nearest_double() -> None:
    # 1 − 0.9 in floats is 0.09999999999999998, which would floor 10,000 × it to 999.
    assert RoomPolicy(0.9, 1).room_tokens(load()) == 1000
    assert RoomPolicy(0.1, 1).room_tokens(load(capacity=30)) == 27
    assert RoomPolicy(0.0, 1).room_tokens(load(capacity=7)) == 7


def test_own_bulk_counts_once_whether_or_not_it_is_leased_yet() -> None:
    policy = RoomPolicy(0.2, 8)
    # 2,000 released and leased beside 1,000 interactive: the lease is not counted twice.
    assert policy.room_tokens(load(leased=3000, bulk_tokens=2000, bulk_requests=2)) == 5000
    # The same 2,000 released, not leased yet: it still takes its 2,000 of the room.
    assert policy.room_tokens(load(leased=0, bulk_tokens=2000, bulk_requests=2)) == 6000
    # Leases below our own bulk: interactive is taken as 0, never negative.
    assert policy.room_tokens(load(leased=500, bulk_tokens=2000, bulk_requests=2)) == 6000
    assert policy.room_tokens(load(leased=0, bulk_tokens=9000, bulk_requests=2)) == 0


def test_a_pass_spends_its_budget_entry_by_entry() -> None:
    budget = RoomPolicy(0.2, max_inflight_requests=3).budget(load(leased=3000, bulk_tokens=2000, bulk_requests=1))
    assert budget == RoomBudget(tokens=5000, requests=2, inflight_requests=1)
    assert budget.allows(5000) and not budget.allows(5001)
    budget.spend(4000)
    assert budget == RoomBudget(tokens=1000, requests=1, inflight_requests=2)
    assert budget.allows(1000) and not budget.allows(1001)
    budget.spend(1000)
    assert not budget.open and not budget.allows(1)  # no tokens, no requests left


def test_an_entry_larger_than_the_room_goes_alone() -> None:
    """A pool whose room is never as large as a long entry must still run it some time: when
    none of our bulk is in flight there, it goes, and nothing after it in the same pass."""
    budget = RoomPolicy(0.2, max_inflight_requests=8).budget(load(leased=7000))
    assert budget.tokens == 1000 and budget.allows(5000)
    budget.spend(5000)
    assert not budget.open and not budget.allows(1)
    # With bulk in flight it waits for room like any other entry.
    assert not RoomPolicy(0.2, 8).budget(load(leased=7000, bulk_tokens=500, bulk_requests=1)).allows(5000)
    # A closed room lets nothing go, however small the pool's bulk.
    assert not RoomPolicy(0.2, 8).budget(load(leased=7000, waiting=1)).allows(1)


def test_no_room_while_people_wait_at_max_inflight_or_without_capacity() -> None:
    policy = RoomPolicy(0.2, max_inflight_requests=3)
    assert policy.room_tokens(load(waiting=1)) == 0
    assert policy.room_tokens(load(bulk_tokens=300, bulk_requests=3)) == 0
    assert policy.room_tokens(load(bulk_tokens=300, bulk_requests=2)) == 7700
    assert policy.room_tokens(load(capacity=0)) == 0
    assert [policy.requests_room(load(bulk_requests=n)) for n in (0, 2, 3, 5)] == [3, 1, 0, 0]


@pytest.mark.parametrize(("reserve", "max_inflight"), [(-0.1, 1), (1.0, 1), (0.2, 0)])
def test_room_policy_rejects_bad_settings(reserve: float, max_inflight: int) -> None:
    with pytest.raises(ValueError):
        RoomPolicy(reserve, max_inflight)


# --- ReleaseOrder -------------------------------------------------------------------------------


def tokens_served(order: ReleaseOrder, candidates: list[Candidate], picks: int) -> dict[str, int]:
    served: dict[str, int] = {}
    for _ in range(picks):
        chosen = order.pick(candidates)
        assert chosen is not None
        served[chosen.team_id] = served.get(chosen.team_id, 0) + chosen.head_cost
    return served


def test_drr_shares_tokens_by_weight_with_unequal_head_costs() -> None:
    order = ReleaseOrder({"a": 2.0, "b": 1.0}, quantum_tokens=1000)
    # a sends short entries, b long ones: a per-request round robin would give b most tokens.
    served = tokens_served(order, [cand("a1", "a", cost=700), cand("b1", "b", cost=2900)], picks=600)
    assert served["a"] / served["b"] == pytest.approx(2.0, rel=0.03)


def test_drr_three_teams_unknown_team_weighs_one() -> None:
    order = ReleaseOrder({"a": 3.0, "b": 1.0}, quantum_tokens=512)
    candidates = [cand("a1", "a", cost=900), cand("b1", "b", cost=1300), cand("c1", "c", cost=400)]
    served = tokens_served(order, candidates, picks=3000)
    total = sum(served.values())
    assert served["a"] / total == pytest.approx(0.6, rel=0.03)
    assert served["b"] / total == pytest.approx(0.2, rel=0.03)
    assert served["c"] / total == pytest.approx(0.2, rel=0.03)


def test_idle_team_gets_no_burst_when_it_returns() -> None:
    order = ReleaseOrder({"a": 1.0, "b": 1.0}, quantum_tokens=1000)
    a, b = cand("a1", "a"), cand("b1", "b")
    for _ in range(3):
        assert order.pick([a, cand("b-big", "b", cost=5000)]) == a  # b is granted quanta toward its big entry
    assert order.deficits()["b"] >= 2000
    for _ in range(50):
        assert order.pick([a]) == a  # b idle: a alone takes everything
    assert "b" not in order.deficits()
    picks = [order.pick([a, b]) for _ in range(20)]
    # Alternating from the start: b gets its share, not fifty releases of banked credit.
    assert max(len(list(run)) for _, run in itertools.groupby(c.team_id for c in picks if c)) <= 2
    assert sum(1 for c in picks if c and c.team_id == "b") == 10


def test_team_that_goes_idle_loses_its_credit() -> None:
    order = ReleaseOrder({"a": 1.0, "b": 1.0}, quantum_tokens=1000)
    assert order.pick([cand("a1", "a", cost=5000), cand("b1", "b", cost=100)]) == cand("b1", "b", cost=100)
    # a was passed twice (rounds 0 and 1) before b, passed once, could afford its head.
    assert order.deficits() == {"a": 2000, "b": 900}
    order.pick([cand("b1", "b", cost=100)])
    assert set(order.deficits()) == {"b"}


def test_earliest_deadline_first_within_a_team() -> None:
    order = ReleaseOrder({"a": 1.0})
    late = cand("late", "a", deadline=NOW + 2 * HOUR)
    soon = cand("soon", "a", deadline=NOW + HOUR)
    assert order.pick([late, soon]) == soon
    # Same deadline: older batch first, then batch id.
    old = cand("z-old", "a", created=NOW - 60)
    new_x, new_y = cand("x-new", "a"), cand("y-new", "a")
    assert order.pick([new_y, new_x, old]) == old
    assert order.pick([new_y, new_x]) == new_x


def test_at_risk_goes_first_by_deadline_and_is_charged_to_its_team() -> None:
    order = ReleaseOrder({"a": 1.0, "b": 1.0}, quantum_tokens=1000)
    ok = cand("a1", "a", deadline=NOW + 60)
    risky_late = cand("b1", "b", cost=3000, deadline=NOW + 2 * HOUR, at_risk=True)
    risky_soon = cand("b2", "b", cost=3000, deadline=NOW + HOUR, at_risk=True)
    assert order.pick([ok, risky_late, risky_soon]) == risky_soon
    assert order.deficits()["b"] == -3000
    assert order.deficits()["a"] == 0
    # Back to round robin, b owes its rescue: a goes until b has earned its deficit back.
    picks = [order.pick([ok, cand("b1", "b", cost=1000)]) for _ in range(4)]
    assert [c.team_id for c in picks if c] == ["a", "a", "a", "a"]


def test_huge_head_cost_terminates_and_waits_its_turn() -> None:
    order = ReleaseOrder({"a": 1.0, "b": 1.0}, quantum_tokens=1)
    whale, minnow = cand("w", "a", cost=10**15), cand("m", "b", cost=1)
    assert order.pick([whale, minnow]) == minnow
    assert order.pick([whale]) == whale
    assert order.deficits()["a"] == pytest.approx(0, abs=1)
    tiny = ReleaseOrder({"a": 1e-9}, quantum_tokens=1)
    assert tiny.pick([cand("w", "a", cost=10**18)]) is not None


class LoopDrr:
    """The round robin as the words say it, one visit at a time: the reference for ReleaseOrder."""

    def __init__(self, weights: dict[str, float], quantum: int) -> None:
        self.weights, self.quantum = weights, quantum
        self.deficits: dict[str, float] = {}
        self.turn: str | None = None

    def pick(self, candidates: list[Candidate]) -> Candidate:
        teams = sorted({c.team_id for c in candidates})
        self.deficits = {t: self.deficits.get(t, 0.0) for t in teams}
        heads = {
            t: min((c for c in candidates if c.team_id == t), key=lambda c: (c.deadline, c.batch_id)) for t in teams
        }
        i = next((j for j, t in enumerate(teams) if self.turn is not None and t >= self.turn), 0)
        while True:
            team = teams[i % len(teams)]
            if self.deficits[team] >= heads[team].head_cost:
                self.deficits[team] -= heads[team].head_cost
                self.turn = team
                return heads[team]
            self.deficits[team] += self.quantum * self.weights.get(team, 1.0)
            i += 1


def test_arithmetic_round_robin_matches_the_visit_by_visit_loop() -> None:
    rng = random.Random(7)
    weights = {"a": 1.0, "b": 2.0, "c": 0.5}
    order, loop = ReleaseOrder(weights, quantum_tokens=256), LoopDrr(weights, quantum=256)
    for _ in range(500):
        candidates = [
            cand(f"{team}{i}", team, cost=rng.randint(1, 3000), deadline=NOW + rng.randint(0, 9))
            for team in "abcd"
            if rng.random() < 0.8
            for i in range(rng.randint(1, 3))
        ]
        if not candidates:
            continue
        assert order.pick(candidates) == loop.pick(candidates)
        assert order.deficits() == pytest.approx(loop.deficits)


def test_pick_is_deterministic_and_peek_charges_nothing() -> None:
    candidates = [
        cand(f"{team}{i}", team, cost=100 + 37 * i, deadline=NOW + i * 60)
        for team, i in itertools.product("dcab", range(4))
    ]

    def run() -> list[str]:
        order = ReleaseOrder({"a": 1.5, "b": 0.5, "c": 2.0}, quantum_tokens=300)
        out: list[str] = []
        for step in range(200):
            present = candidates[step % 5 :]  # the set changes, and teams come and go
            before = order.deficits()
            peeked = order.peek(present)
            assert order.deficits() == before
            chosen = order.pick(present)
            assert chosen is not None and chosen == peeked
            out.append(chosen.batch_id)
        return out

    assert run() == run()
    assert ReleaseOrder({}).pick([]) is None


def test_turn_stays_with_a_team_while_it_can_afford() -> None:
    order = ReleaseOrder({"a": 1.0, "b": 1.0}, quantum_tokens=3000)
    a, b = cand("a1", "a", cost=1000), cand("b1", "b", cost=1000)
    assert [c.team_id for c in (order.pick([a, b]) for _ in range(6)) if c] == ["a", "a", "a", "b", "b", "b"]


@pytest.mark.parametrize(("weights", "quantum"), [({"a": 0.0}, 10), ({"a": float("nan")}, 10), ({}, 0)])
def test_release_order_rejects_bad_settings(weights: dict[str, float], quantum: int) -> None:
    with pytest.raises(ValueError):
        ReleaseOrder(weights, quantum)


# --- DeadlineRisk and CompletionRate ------------------------------------------------------------


def test_deadline_risk() -> None:
    risk = DeadlineRisk(margin=0.8, min_time_left_s=600)
    deadline = NOW + 1000
    assert not risk.at_risk(0, None, NOW + 2000, deadline)  # nothing left: never at risk
    assert not risk.at_risk(5, None, NOW, deadline)  # no rate, 1,000 s left
    assert risk.at_risk(5, None, NOW + 401, deadline)  # no rate, 599 s left
    assert risk.at_risk(5, 0.0, NOW + 401, deadline)
    assert not risk.at_risk(800, 1.0, NOW, deadline)  # 800 s of work in 0.8 × 1,000 s
    assert risk.at_risk(801, 1.0, NOW, deadline)
    assert risk.at_risk(1, 100.0, NOW + 1001, deadline)  # past the deadline
    assert risk.eta_s(300, 2.0) == 150.0
    assert risk.eta_s(300, None) is None
    assert risk.eta_s(0, None) == 0.0


def test_completion_rate_over_the_window() -> None:
    rate = CompletionRate(window_s=100)
    assert rate.per_s() is None
    rate.observe(0, NOW)
    rate.observe(0, NOW)
    assert rate.per_s() is None  # two samples, no time between them
    rate.observe(50, NOW + 10)
    assert rate.per_s() == 5.0
    for t in range(20, 400, 10):
        rate.observe(40 + t, NOW + t)  # 1 entry/s from here on
    assert rate.per_s() == pytest.approx(1.0)
    rate.observe(430, NOW + 500)  # stalled for 110 s
    assert rate.per_s() == 0.0


def test_completion_rate_ignores_clock_steps_back_and_restarts_on_reset() -> None:
    rate = CompletionRate(window_s=100)
    rate.observe(10, NOW)
    rate.observe(20, NOW + 10)
    rate.observe(99, NOW + 5)  # earlier than the newest sample: ignored
    assert rate.per_s() == 1.0
    rate.observe(3, NOW + 20)  # the count restarted
    assert rate.per_s() is None
    rate.observe(7, NOW + 22)
    assert rate.per_s() == 2.0


def test_completion_rate_keeps_few_samples_however_often_observed() -> None:
    rate = CompletionRate(window_s=64)
    for i in range(20_000):
        rate.observe(i, NOW + i * 0.05)
    assert rate.per_s() == pytest.approx(20.0)
    assert len(rate._samples) <= 2 * 64 + 2


def test_bulk_in_flight_is_held_low_while_interactive_requests_run() -> None:
    policy = RoomPolicy(0.2, max_inflight_requests=32, max_inflight_beside_interactive=8)
    quiet = PoolLoad("p", 10_000, leased_tokens=500, bulk_inflight_tokens=500, bulk_inflight_requests=8,
                     interactive_waiting=0)  # fmt: skip
    assert policy.requests_room(quiet) == 24  # the leases are all ours: nobody interactive
    busy = PoolLoad("p", 10_000, leased_tokens=600, bulk_inflight_tokens=500, bulk_inflight_requests=8,
                    interactive_waiting=0)  # fmt: skip
    assert policy.requests_room(busy) == 0 and policy.room_tokens(busy) == 0
    fewer = PoolLoad("p", 10_000, leased_tokens=600, bulk_inflight_tokens=300, bulk_inflight_requests=5,
                     interactive_waiting=0)  # fmt: skip
    assert policy.requests_room(fewer) == 3 and policy.room_tokens(fewer) == 8_000 - 300 - 300


def test_interactive_requests_the_servers_report_hold_bulk_low_too() -> None:
    """Our bulk estimate (a byte bound) can exceed its real leases: the servers' count decides."""
    policy = RoomPolicy(0.2, max_inflight_requests=32, max_inflight_beside_interactive=8)
    load = PoolLoad("p", 10_000, leased_tokens=400, bulk_inflight_tokens=900, bulk_inflight_requests=8,
                    interactive_waiting=0, interactive_running=2)  # fmt: skip
    assert policy.requests_room(load) == 0
    assert policy.requests_room(replace(load, interactive_running=0)) == 24


def test_people_served_lately_keep_bulk_low_for_the_hold() -> None:
    policy = RoomPolicy(0.2, max_inflight_requests=32, max_inflight_beside_interactive=8, interactive_hold_s=10.0)
    busy = PoolLoad("p", 10_000, 0, 0, 8, 0, interactive_running=1)
    between_turns = replace(busy, interactive_running=0)
    assert policy.requests_room(policy.note(between_turns, now=0.0)) == 24  # nobody seen yet
    assert policy.requests_room(policy.note(busy, now=1.0)) == 0
    assert policy.requests_room(policy.note(between_turns, now=10.9)) == 0  # within the hold
    assert policy.requests_room(policy.note(between_turns, now=11.0)) == 24
    assert policy.note(between_turns, now=5.0).pool_id == "p"
    assert not policy.note(replace(busy, pool_id="q", interactive_running=0), now=5.0).people_recently  # per pool
