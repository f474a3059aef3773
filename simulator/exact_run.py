"""One exact run: a scenario, one policy, a seed ─▶ a `Recorder`.

The fleet starts the day as it would be at midnight: the policy is asked once what the pool
needs (with the night's load and yesterday's bulk carry-over) and that many servers are ready
at t = 0; from then on every server it adds takes `startup_s`.
"""

from __future__ import annotations

import math

from autoscaler.signals import ScalingPolicy
from simulator.events import EventQueue
from simulator.exact_control import next_arrival, next_failure, signals
from simulator.exact_events import (
    AutoscaleTick,
    BatchArrival,
    DispatchTick,
    InteractiveArrival,
    SampleTick,
    ServerFailure,
)
from simulator.exact_fleet import ExactFleet
from simulator.length_moments import scenario_capacity
from simulator.recorder import Recorder
from simulator.scenario import Scenario
from simulator.settings import SimSettings
from simulator.variants import Variant


def initial_servers(world: ExactFleet, policy: ScalingPolicy) -> int:
    """Servers ready at midnight: what the policy asks for the night's expected load."""
    scenario, settings = world.scenario, world.settings
    capacity = scenario_capacity(scenario, settings)
    guess = math.ceil(scenario.rate_at(0.0) * capacity.avg_request_s / capacity.requests / 0.8) + 1
    guess = min(max(guess, settings.min_copies), scenario.gpus)
    for _ in range(guess):
        world.add_server(0.0, ready=True)
    # The last minute's arrivals, as a fleet running since yesterday would have counted them.
    window = settings.rate_window_s
    seeded = []
    for request_class, share in scenario.class_mix:
        count = round(scenario.rate_at(0.0) * share * window)
        seeded += [(-window + (i + 0.5) * window / count, request_class) for i in range(count)]
    world.arrivals.extend(sorted(seeded))
    decided = policy.decide(signals(world, 0.0)).target
    return max(min(decided, scenario.gpus), settings.min_copies)


def run_exact(
    scenario: Scenario,
    settings: SimSettings,
    policy: ScalingPolicy,
    variant: Variant,
    seed: int,
    *,
    recorder: Recorder | None = None,
    initial_ready: int | None = None,
) -> Recorder:
    """Run the day; `initial_ready` fixes the servers ready at t = 0 (else the policy says)."""
    world, queue = start_exact(scenario, settings, policy, variant, seed, recorder, initial_ready)
    queue.run_until(world, scenario.duration_s)
    return world.finish_run(scenario.duration_s)


def start_exact(
    scenario: Scenario,
    settings: SimSettings,
    policy: ScalingPolicy,
    variant: Variant,
    seed: int,
    recorder: Recorder | None = None,
    initial_ready: int | None = None,
) -> tuple[ExactFleet, EventQueue[ExactFleet]]:
    """The world at midnight and its first events (tests run it step by step from here)."""
    if recorder is None:
        recorder = Recorder(scenario.hours, focus_s=scenario.focus_s)
    world = ExactFleet(scenario, settings, policy, variant, seed, recorder)
    for plan in scenario.batches():
        if plan.arrival_s <= 0:
            world.add_batch(plan, 0.0)
    target = initial_servers(world, policy) if initial_ready is None else initial_ready
    for _ in range(target - len(world.servers)):
        world.add_server(0.0, ready=True)
    world.target = target
    queue: EventQueue[ExactFleet] = EventQueue()
    for plan in scenario.batches():
        if plan.arrival_s > 0:
            queue.push(BatchArrival(plan.arrival_s, plan))
    first = next_arrival(world, 0.0)
    if first is not None:
        queue.push(InteractiveArrival(first))
    queue.push(DispatchTick(0.0))
    queue.push(AutoscaleTick(settings.autoscaler.interval_s))
    queue.push(SampleTick(0.0))
    failure = next_failure(world, 0.0)
    if failure is not None:
        queue.push(ServerFailure(failure))
    return world, queue
