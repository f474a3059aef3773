"""The fluid fleet's flows: Little's law holds for the stock admission and the busy measure
see, and a batch's last request ends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.sim.fluid_fleet import FluidFleet
from fleet.sim.fluid_run import ProbeSettings, run_fast
from fleet.sim.length_moments import scenario_capacity
from fleet.sim.scenario import BatchPlan, scenario
from fleet.sim.settings import SimSettings
from fleet.sim.variants import Variant, make_policy


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
