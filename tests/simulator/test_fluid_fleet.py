"""The fluid fleet's flows: Little's law holds for the stock admission and the busy measure
see, and a batch's last request ends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.fluid_fleet import FluidFleet
from simulator.fluid_run import ProbeSettings, run_fast
from simulator.length_moments import scenario_capacity
from simulator.scenario import BatchPlan, scenario
from simulator.settings import SimSettings
from simulator.variants import Variant, make_policy


def test_the_stock_in_flight_is_rate_times_duration() -> None:
    """Counted at the top of each tick's sawtooth (arrivals admitted at its start, a tick's
    endings after), 4-s ticks of 10-s requests held a fifth more than rate × duration."""
    flat = replace(
        scenario("weekday", gpus=40, hours=1.0), knots=((0.0, 1.0), (24.0, 1.0)), bulk_per_day=0.0, carry_over_hours=0
    )
    fleet = FluidFleet(flat, SimSettings(), Variant("people", backfill=False), seed=3)
    for _ in range(flat.gpus):
        fleet.servers.add(0.0, ready_at=0.0)
    dt, t = 4.0, 0.0
    while t < 300.0:  # warm up to the steady state
        fleet.tick(t, dt)
        t += dt
    fleet.recorder.kv_token_s = 0.0
    start = t
    while t < 1500.0:
        fleet.tick(t, dt)
        t += dt
    m = fleet.m
    in_flight = fleet.recorder.kv_token_s / (t - start) / (fleet.held_per_leased() * m.lease_in_flight)
    _, duration = fleet.durations()
    assert fleet.recorder.counters["interactive_refused"] == 0
    assert in_flight == pytest.approx(flat.rate_at(0.0) * duration, rel=0.05)


def test_a_batch_in_the_fast_mode_finishes_to_its_last_request() -> None:
    """A flow's stock decays geometrically: its last request must still end."""
    day = replace(
        scenario("weekday", gpus=16, hours=0.5),
        bulk_per_day=0.0,
        carry_over_hours=0,
        extra_batches=(BatchPlan("small", "analytics", 0.0, 2_000),),
    )
    settings = SimSettings()
    policy, variant = make_policy("static", day, settings, scenario_capacity(day, settings))
    recorder = run_fast(day, settings, policy, variant, seed=5, probe=ProbeSettings(every_s=900.0))
    batch = recorder.batches["small"]
    assert batch.done == batch.count
    assert batch.finished_s is not None and batch.finished_s < day.duration_s


def busy_at_night(fraction: float) -> tuple[float, float]:
    """(KV held / KV, the share of the usable pool bulk leases) over 10 minutes of a fleet
    with only bulk, leasing `fraction` of each request's prompt + max_tokens."""
    night = replace(
        scenario("weekday", gpus=8, hours=1.0),
        knots=((0.0, 0.0), (24.0, 0.0)),
        bulk_per_day=0.0,
        carry_over_hours=0,
        extra_batches=(BatchPlan("night", "analytics", 0.0, 10**7),),
    )
    settings = replace(SimSettings(), bulk_lease_fraction=fraction)
    fleet = FluidFleet(night, settings, Variant("autoscaler", backfill=True), seed=3)
    for plan in night.batches():
        fleet.add_batch(plan, 0.0)
    for _ in range(night.gpus):
        fleet.servers.add(0.0, ready_at=0.0)
    dt, t = 4.0, 0.0
    while t < 120.0:
        fleet.tick(t, dt)
        t += dt
    fleet.recorder.kv_token_s = 0.0
    start, leased = t, 0.0
    while t < 720.0:
        fleet.tick(t, dt)
        leased += fleet.leased_tokens(fleet.bulk) * dt
        t += dt
    usable = fleet.capacity_tokens() * (1 - settings.reserve_fraction)
    return fleet.recorder.kv_token_s / (t - start) / fleet.capacity_tokens(), leased / (t - start) / usable


def test_bulk_leasing_a_fraction_fills_the_pool_to_what_it_holds() -> None:
    """A pool full of bulk leases holds `held_per_leased` of them (~0.91); bulk leasing 0.9 of
    its prompt + max_tokens fills the same leases and holds a ninth more KV."""
    whole, whole_leased = busy_at_night(1.0)
    part, part_leased = busy_at_night(0.9)
    assert whole_leased == pytest.approx(part_leased, rel=0.01)
    assert whole_leased > 0.9  # the dispatcher keeps the usable pool leased (less a slice's endings)
    assert part / whole == pytest.approx(1 / 0.9, rel=0.01)


def test_the_probes_run_the_bulk_of_every_team_running_it() -> None:
    day = replace(
        scenario("weekday", gpus=8, hours=1.0),
        bulk_per_day=0.0,
        carry_over_hours=0,
        extra_batches=(BatchPlan("b1", "docs", 0.0, 10**6), BatchPlan("b2", "analytics", 0.0, 10**6)),
    )
    fleet = FluidFleet(day, SimSettings(), Variant("autoscaler", backfill=True), seed=3)
    assert fleet.bulk_teams() == ()
    for plan in day.batches():
        fleet.add_batch(plan, 0.0)
    for _ in range(day.gpus):
        fleet.servers.add(0.0, ready_at=0.0)
    fleet.tick(0.0, 4.0)
    assert fleet.bulk_teams() == ("analytics", "docs")
