"""No request is lost: every bulk request released is done, in flight, or back in its batch,
and every arrival of each of people's classes is served, in flight (held at a server's tier
gate included), waiting, refused or timed out, in both modes, through failures (a dispatcher
tick whose entries admission refuses part-way used to drop the rest) and with the tiers (flex
withdrawn for a higher tier's blocks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.exact_run import start_exact
from simulator.fluid_run import ProbeSettings, run_fast
from simulator.length_moments import scenario_capacity
from simulator.scenario import TIER_MIX, scenario
from simulator.settings import SimSettings
from simulator.sim_request import BULK, SHAPED_CLASSES
from simulator.variants import make_policy


@pytest.mark.parametrize("tiers", [False, True], ids=["one-class", "tiers"])
def test_the_exact_mode_loses_no_request_even_when_servers_die(tiers: bool) -> None:
    day = replace(scenario("failures", gpus=8, hours=0.1), failures_per_server_hour=20.0)
    if tiers:  # people beyond what 4 GPUs hold: flex waits, is refused and gives up its KV
        day = replace(day, gpus=4, class_mix=TIER_MIX, peak_rate=1500.0, knots=((0.0, 1.0), (24.0, 1.0)))
    settings = SimSettings()
    policy, variant = make_policy("autoscaler", day, settings, scenario_capacity(day, settings))
    world, queue = start_exact(day, settings, policy, variant, seed=4)
    queue.run_until(world, day.duration_s)
    counters = world.recorder.counters
    assert counters["failures"] > 0 and counters["retried"] > 0

    held = [r for s in world.servers.values() for r in s.requests.values()] + list(world.homeless)
    bulk_held = sum(1 for r in held if r.request_class == BULK)
    released = sum(b.released for b in world.feed_batches.values())
    assert released == counters["bulk_done"] + bulk_held
    assert world.feed.inflight_requests == bulk_held

    for request_class in SHAPED_CLASSES:
        accounted = (
            counters[f"{request_class}_done"]
            + sum(1 for r in held if r.request_class == request_class)
            + len(world.waiters[request_class])
            + counters[f"{request_class}_refused"]
            + counters[f"{request_class}_timed_out"]
        )
        assert accounted == counters[f"{request_class}_arrived"], request_class
    if tiers:
        assert min(counters[f"{c}_arrived"] for c in SHAPED_CLASSES) > 0
        assert counters["flex_refused"] > 0 and counters["flex_preempted"] > 0


def test_the_fast_mode_finishes_what_it_releases() -> None:
    day = scenario("weekday", gpus=16, hours=0.25)
    settings = SimSettings()
    policy, variant = make_policy("static", day, settings, scenario_capacity(day, settings))
    recorder = run_fast(day, settings, policy, variant, seed=4, probe=ProbeSettings(every_s=600.0))
    done_by_batches = sum(b.done for b in recorder.batches.values())
    assert done_by_batches == pytest.approx(recorder.counters["bulk_done"], abs=len(recorder.batches) * 2)
    assert recorder.counters["interactive_done"] == pytest.approx(recorder.counters["interactive_arrived"], rel=0.05)
