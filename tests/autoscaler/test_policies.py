"""Autoscaler policies: Little's law on the forecast, EDF deadlines, bulk soak, the reactive
floor, headroom and bounds, scale-in hysteresis; the reactive and static baselines.

One server here holds 35 replies and computes 1,000 tokens/s; a reply lasts 10 s; at the 0.8 KV
target a server seats 28 replies, so 2.8 req/s fill one: 280 req/s need 100 servers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from autoscaler.demand_classes import DEMAND_CLASSES, SCALING_ROLE
from autoscaler.load_profile import LoadProfile
from autoscaler.policies import Autoscaler, ReactiveAutoscaler, StaticFleet
from autoscaler.signals import BulkDemand, PoolSignals, ServerCapacity
from config.settings import AutoscalerSpec
from contracts.service_tier import REQUEST_CLASSES, RequestClass

HOUR = 3_600.0
DAY = 86_400.0
MONDAY = datetime(2026, 11, 30, tzinfo=UTC).timestamp()
NOW = MONDAY + 12 * HOUR
CAPACITY = ServerCapacity(requests=35, tokens_per_s=1000.0, avg_request_s=10.0, startup_s=480.0)
SPEC = AutoscalerSpec(
    interval_s=15, startup_s=480, target_kv_fraction=0.8, headroom_servers=1, scale_in_after_s=600, ttft_target_s=1.0
)


def signals(
    now: float = NOW,
    *,
    ready: int,
    rate: float = 0.0,
    starting: int = 0,
    bulk: tuple[BulkDemand, ...] = (),
    kv: float = 0.0,
    waiting: int = 0,
    ttft: float | None = None,
) -> PoolSignals:
    return PoolSignals(
        pool_id="large",
        now=now,
        ready=ready,
        starting=starting,
        draining=0,
        arrival_rates={"interactive": rate},
        kv_used_fraction=kv,
        waiting_requests=waiting,
        ttft_p99_s=ttft,
        bulk=bulk,
    )


def autoscaler(
    spec: AutoscalerSpec = SPEC, *, min_copies: int = 0, max_copies: int = 1000, profile: LoadProfile | None = None
) -> Autoscaler:
    # level_tau_s=0: the level is the last rate seen, so each decision's rate is exact; no trend
    # term, so a test's step in the rate is not also read as a rising trend.
    profile = LoadProfile(level_tau_s=0.0, trend_tau_s=None) if profile is None else profile
    return Autoscaler(spec, CAPACITY, min_copies=min_copies, max_copies=max_copies, profile=profile)


def due_in(seconds: float, tokens: int) -> BulkDemand:
    return BulkDemand(tokens_left=tokens, deadline=NOW + seconds)


# --- interactive demand: Little's law on the forecast ------------------------------------------


def test_interactive_need_is_littles_law_at_the_kv_target_plus_headroom() -> None:
    decision = autoscaler().decide(signals(ready=50, rate=280.0))
    assert decision.target == 101  # 280 × 10 s / (35 × 0.8) = 100, + 1 spare
    assert decision.change == 51
    assert decision.reasons[:2] == ("forecast 280 req/s now needs 100", "headroom: +1 for a failed server")
    assert decision.parts["interactive_load"] == pytest.approx(80.0)
    assert decision.parts["interactive_servers"] == 100.0


def morning_ramp(time_of_day_s: float) -> float:
    """280 req/s at night, linear to 2,800 between 7:00 and 9:00."""
    return 280.0 + 2520.0 * min(max((time_of_day_s - 7 * HOUR) / (2 * HOUR), 0.0), 1.0)


def test_the_look_ahead_covers_the_ramp_a_startup_early_and_the_reactive_baseline_lags() -> None:
    profile = LoadProfile(level_tau_s=0.0)
    for day in (2, 1):
        for minute in range(1440):
            offset = minute * 60.0 + 30.0
            profile.record(MONDAY - day * DAY + offset, morning_ramp(offset))
    ahead = Autoscaler(SPEC, CAPACITY, min_copies=1, max_copies=1000, profile=profile)
    reactive = ReactiveAutoscaler(SPEC, CAPACITY, min_copies=1, max_copies=1000)
    now = MONDAY + 7.5 * HOUR  # 910 req/s now; 7:38:15 (480 s start + 15 s interval ahead): 1,083.25
    decision = ahead.decide(signals(now, ready=300, rate=910.0))
    assert decision.target == 388  # 1,083.25 / 2.8 = 386.9 -> 387, + 1
    assert decision.reasons[0] == "forecast 1083 req/s in 8m 15s needs 387"
    assert reactive.decide(signals(now, ready=300, rate=910.0)).target == 326  # 910 / 2.8 = 325, + 1
    # The reactive policy asks for those 388 only once the load is there, a start-up too late.
    later = signals(now + 495.0, ready=326, rate=1083.25)
    assert reactive.decide(later).target == 388


# --- the four classes: priority and interactive start servers, flex never -----------------------


def rates(request_class: RequestClass, rate: float) -> PoolSignals:
    return replace(signals(ready=50), arrival_rates={request_class: rate})


@pytest.mark.parametrize("request_class", ["priority", "interactive"])
def test_the_demand_classes_drive_scale_up(request_class: RequestClass) -> None:
    assert autoscaler().decide(rates(request_class, 280.0)).target == 101  # as above
    assert (
        ReactiveAutoscaler(SPEC, CAPACITY, min_copies=0, max_copies=1000).decide(rates(request_class, 280.0)).target
        == 101
    )


def test_flex_demand_never_starts_a_server_while_the_same_demand_as_interactive_does() -> None:
    flex, people = autoscaler(), autoscaler()
    reactive_flex = ReactiveAutoscaler(SPEC, CAPACITY, min_copies=0, max_copies=1000)
    for minute in range(30):  # half an hour of 280 req/s on 50 servers, rising
        now = NOW + 60.0 * minute
        rate = 280.0 + 10.0 * minute
        flex_signals = replace(rates("flex", rate), now=now)
        assert flex.decide(flex_signals).target <= 50
        assert reactive_flex.decide(flex_signals).target <= 50
        assert people.decide(replace(rates("interactive", rate), now=now)).target > 100
    assert flex_signals.demand_rate == 0.0


def test_the_demand_rate_adds_priority_and_interactive_only() -> None:
    mixed = replace(signals(ready=50), arrival_rates={"priority": 30.0, "interactive": 250.0, "flex": 500.0})
    assert mixed.demand_rate == 280.0
    assert autoscaler().decide(mixed).target == 101
    assert {c for c, role in SCALING_ROLE.items() if role == "demand"} == set(DEMAND_CLASSES)
    assert set(SCALING_ROLE) == set(REQUEST_CLASSES)


# --- bulk deadlines (EDF) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("due_s", "target"),
    [
        (2 * HOUR, 11),  # 69,120 server-s: 4 ready × 7,200 s + 6 new × 6,720 s = 10, + 1
        (4 * HOUR, 6),  # 4 + (69,120 − 57,600) / 13,920 = 4.83 -> 5, + 1
    ],
)
def test_a_backlog_due_sooner_needs_more_servers(due_s: float, target: int) -> None:
    decision = autoscaler().decide(signals(ready=4, bulk=(due_in(due_s, 69_120_000),)))
    assert decision.target == target
    assert decision.parts["bulk_servers"] == target - 1


def test_the_reason_names_the_binding_deadline() -> None:
    decision = autoscaler().decide(signals(ready=4, bulk=(due_in(2 * HOUR, 69_120_000),)))
    assert "bulk: 6.9e7 tokens due in 2h 00m need 10" in decision.reasons


@pytest.mark.parametrize(
    ("early_tokens", "late_tokens", "target"),
    [
        # by 1 h: 30,000 s / 3,120 = 9.6 -> 10; by 2 h: 40,000 s / 6,720 = 5.95 -> 6: the 1 h binds
        (30_000_000, 10_000_000, 11),
        # by 1 h: 10,000 / 3,120 = 3.2; by 2 h: 60,000 / 6,720 = 8.93 -> 9 (alone the 2 h batch needs 8)
        (10_000_000, 50_000_000, 10),
    ],
)
def test_deadlines_count_everything_due_before_them(early_tokens: int, late_tokens: int, target: int) -> None:
    bulk = (due_in(2 * HOUR, late_tokens), due_in(HOUR, early_tokens))  # not in deadline order
    assert autoscaler().decide(signals(ready=0, bulk=bulk)).target == target


def test_bulk_uses_only_the_room_interactive_servers_leave() -> None:
    # 280 req/s keep 80 full servers busy and need 100 at the KV target: the 20 spare servers'
    # 144,000 server-s by 2 h carry 144e6 tokens; 67.2e6 more need (67,200 / 6,720) = 10 new.
    scaler = autoscaler()
    decision = scaler.decide(signals(ready=100, rate=280.0, bulk=(due_in(2 * HOUR, 211_200_000),)))
    assert decision.target == 111
    assert decision.parts["bulk_extra_servers"] == 10.0
    fits = autoscaler().decide(signals(ready=100, rate=280.0, bulk=(due_in(2 * HOUR, 144_000_000),)))
    assert fits.target == 101
    assert fits.parts["bulk_servers"] == 100.0


def test_an_overnight_backlog_is_sized_to_finish_before_the_morning_ramp() -> None:
    # Two days seen: 28 req/s (8 full servers' worth) until 06:00, then 280 (80 servers' worth).
    profile = LoadProfile(level_tau_s=0.0, trend_tau_s=None)
    for day in (2, 1):
        for minute in range(1440):
            profile.record(MONDAY - day * DAY + minute * 60.0, 28.0 if minute < 360 else 280.0)
    now = MONDAY + 2 * HOUR
    # 12 servers' worth for 4 h, due at 08:00: held flat at tonight's load it would spread over
    # 6 h (8 + 12 × 4 / 6 = 16 servers); the forecast sees 06:00–08:00 full of people, so it must
    # be done by 06:00: 8 + 12 = 20.
    backlog = BulkDemand(tokens_left=int(12 * 4 * HOUR * CAPACITY.tokens_per_s), deadline=now + 6 * HOUR)
    decision = autoscaler(profile=profile).decide(signals(now, ready=20, rate=28.0, bulk=(backlog,)))
    assert decision.parts["bulk_servers"] == 20.0
    assert decision.target == 21  # + headroom


def test_a_deadline_before_a_server_could_start_asks_for_the_most() -> None:
    decision = autoscaler(max_copies=50).decide(signals(ready=2, bulk=(due_in(300.0, 10_000_000),)))
    assert decision.target == 50
    assert "bulk: 1.0e7 tokens due in 5m 00s cannot be met (a server takes 8m 00s to start)" in decision.reasons


def test_batches_past_their_deadline_are_not_counted() -> None:
    decision = autoscaler(min_copies=1).decide(signals(ready=1, bulk=(due_in(-10.0, 5_000_000_000),)))
    assert decision.target == 1
    assert "bulk: 5.0e9 tokens past their deadline, not counted" in decision.reasons


# --- bulk soaks idle capacity -------------------------------------------------------------------


def test_a_backlog_that_can_fill_the_servers_keeps_them_up() -> None:
    # 28 req/s need 11; 1e9 tokens can fill 2,020 servers for 495 s: all 100 stay, no hold.
    decision = autoscaler().decide(signals(ready=100, rate=28.0, bulk=(due_in(20 * HOUR, 1_000_000_000),)))
    assert decision.target == 100
    assert decision.reasons[-1] == "bulk soak: 1.0e9 tokens keep 100 busy"


def test_servers_the_backlog_cannot_fill_go_after_the_hold() -> None:
    # 8 full servers of interactive load + 20e6 / (1,000 × 495) = 40.4 for bulk: 49 stay busy.
    decision = autoscaler().decide(signals(ready=100, rate=28.0, bulk=(due_in(20 * HOUR, 20_000_000),)))
    assert decision.parts["soak_servers"] == 49.0
    assert decision.target == 100
    assert decision.reasons[-1] == "scale-in held: need 49 below 100 for 0 s of 600"


# --- hysteresis ---------------------------------------------------------------------------------


def test_scale_in_waits_for_the_hold_then_drains_one_per_decision_and_a_spike_resets_it() -> None:
    scaler = autoscaler(min_copies=1)
    assert scaler.decide(signals(NOW, ready=20, rate=28.0)).target == 20  # need 11
    held = scaler.decide(signals(NOW + 585, ready=20, rate=28.0))
    assert (held.target, held.reasons[-1]) == (20, "scale-in held: need 11 below 20 for 585 s of 600")
    drained = scaler.decide(signals(NOW + 600, ready=20, rate=28.0))
    assert (drained.target, drained.reasons[-1]) == (19, "scale-in: need 11 below 20 for 10m 00s: drain one")
    assert scaler.decide(signals(NOW + 615, ready=19, rate=28.0)).target == 18
    assert scaler.decide(signals(NOW + 630, ready=18, rate=56.0)).target == 21  # spike: 20 + 1, at once
    pending = scaler.decide(signals(NOW + 645, ready=18, starting=3, rate=28.0))
    assert (pending.target, pending.reasons[-1]) == (21, "scale-in held: 3 still starting")
    assert scaler.decide(signals(NOW + 1230, ready=21, rate=28.0)).target == 21  # held since 645
    assert scaler.decide(signals(NOW + 1245, ready=21, rate=28.0)).target == 20


# --- bounds and headroom ------------------------------------------------------------------------


def test_the_need_is_held_to_max_copies() -> None:
    decision = autoscaler(max_copies=400).decide(signals(ready=300, rate=2000.0))
    assert decision.target == 400
    assert decision.reasons[-1] == "need 716 held to max 400"  # 2,000 / 2.8 = 714.3 -> 715, + 1


def test_an_idle_pool_is_held_to_min_copies_without_a_spare() -> None:
    decision = autoscaler(min_copies=3).decide(signals(ready=1, rate=0.0))
    assert decision.target == 3
    assert decision.parts["headroom"] == 0.0
    assert decision.reasons[-1] == "need 0 held to min 3"


def test_headroom_adds_spare_servers() -> None:
    spec = SPEC.model_copy(update={"headroom_servers": 3})
    assert autoscaler(spec).decide(signals(ready=50, rate=280.0)).target == 103


# --- the reactive floor -------------------------------------------------------------------------


def test_ttft_over_target_beside_memory_pressure_adds_one_server_once() -> None:
    soaking = (BulkDemand(tokens_left=1, deadline=NOW + 20 * HOUR),)
    decision = autoscaler().decide(signals(ready=11, rate=28.0, ttft=1.5, kv=0.9, bulk=soaking))
    assert decision.target == 12  # the forecast's 11 are ready, yet people wait
    assert "TTFT p99 1.50 s over 1.00 s: one more than 11 ready" in decision.reasons
    # While that server starts, the floor asks for nothing more.
    starting = signals(ready=11, starting=1, rate=28.0, ttft=1.5, kv=0.9, bulk=soaking)
    assert autoscaler().decide(starting).target == 12


def test_a_slow_first_token_without_a_queue_or_full_memory_is_a_long_prompt_not_a_shortage() -> None:
    decision = autoscaler().decide(signals(ready=11, rate=28.0, ttft=1.5))
    assert decision.target == 11
    assert not any("TTFT" in reason for reason in decision.reasons)


def test_waiting_requests_ask_for_seats() -> None:
    assert autoscaler().decide(signals(ready=10, waiting=56)).target == 12  # 56 / 28 seats = 2 more


def test_kv_over_target_scales_with_the_overshoot_unless_bulk_is_soaking() -> None:
    assert autoscaler().decide(signals(ready=16, kv=0.9)).target == 18  # 16 × 0.9 / 0.8
    soaking = autoscaler().decide(signals(ready=16, kv=0.9, bulk=(due_in(DAY, 1000),)))
    assert soaking.target == 16  # bulk fills the room by design: no scale-out, a scale-in hold
    assert not any(reason.startswith("KV") for reason in soaking.reasons)


# --- baselines and misuse -----------------------------------------------------------------------


def test_the_reactive_baseline_ignores_bulk() -> None:
    reactive = ReactiveAutoscaler(SPEC, CAPACITY, min_copies=1, max_copies=50)
    decision = reactive.decide(signals(ready=2, rate=28.0, bulk=(due_in(300.0, 10_000_000),)))
    assert decision.target == 11
    assert decision.reasons == ("current 28 req/s needs 10", "headroom: +1 for a failed server")


def test_the_static_fleet_always_asks_for_its_copies() -> None:
    fleet = StaticFleet(400)
    for ready, rate in ((10, 0.0), (400, 2800.0), (500, 28.0)):
        decision = fleet.decide(signals(ready=ready, rate=rate))
        assert (decision.target, decision.change) == (400, 400 - ready)


def test_one_object_decides_for_one_pool() -> None:
    scaler = autoscaler()
    scaler.decide(signals(ready=1))
    with pytest.raises(ValueError, match="one per pool"):
        scaler.decide(PoolSignals("small", NOW, 1, 0, 0, {}, 0.0, 0, None))


def test_bounds_are_validated() -> None:
    with pytest.raises(ValueError, match="max_copies"):
        Autoscaler(SPEC, CAPACITY, min_copies=5, max_copies=4)
