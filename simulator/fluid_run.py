"""One fast run: the fluid fleet (`fluid_fleet.py`) stepped every 4 s, the autoscaler asked
every interval, a probe cell run every `every_s` (`ramp_every_s` through the morning ramp,
`surge_every_s` through a surge), failures and the minute sample as in the exact mode. A day of
400 GPUs takes 45 s to two minutes of one core (docs/simulator.md, "Run time")."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from autoscaler.signals import PoolSignals, ScalingPolicy
from contracts.service_tier import RequestClass
from simulator.fluid_fleet import FluidFleet
from simulator.probe import run_probe
from simulator.recorder import FleetSample, Recorder
from simulator.scenario import DAY, Scenario
from simulator.settings import SimSettings
from simulator.summary import RAMP
from simulator.variants import Variant


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    every_s: float = 1800.0
    # Through the morning ramp, where S6 judges time to first token and load moves fastest,
    # a probe every `ramp_every_s` measuring `ramp_window_s`: six times the samples a p99
    # rests on there (with 30-min probes of 60 s, one hour's p99 swung from 1.2 s to 5 s).
    ramp_every_s: float = 600.0
    ramp_window_s: float = 120.0
    # Through a surge (the scenario's flash crowd), whose first eight minutes no new server can
    # help: a probe every `surge_every_s`, so each stretch of it is served at latencies measured
    # at its own load, not the last ones before it.
    surge_every_s: float = 120.0
    cell: int = 4  # enough servers for the router to find a document room most of the time
    warmup_s: float = 40.0
    window_s: float = 60.0


def fluid_signals(fleet: FluidFleet, now: float) -> PoolSignals:
    settings = fleet.settings
    arrivals: deque[tuple[float, RequestClass, int]] = fleet.gateway.arrivals
    while arrivals and arrivals[0][0] < now - settings.rate_window_s:
        arrivals.popleft()
    rates: dict[RequestClass, float] = {c: 0.0 for c, _ in fleet.scenario.class_mix}
    for _, request_class, count in arrivals:
        rates[request_class] += count
    capacity = fleet.capacity_tokens()
    # The demand classes' first tokens, and their oldest waiter: flex waits for room by design.
    ttft = fleet.ttft.demand.every.percentile(0.99)
    oldest = fleet.gateway.oldest_demand_waiter()
    if oldest is not None:
        ttft = max(ttft or 0.0, now - oldest)
    return PoolSignals(
        pool_id=settings.pool_id,
        now=now,
        ready=fleet.servers.ready,
        starting=fleet.servers.starting,
        draining=fleet.servers.draining,
        arrival_rates={c: n / settings.rate_window_s for c, n in rates.items()},
        # Flex fills what runs: its KV asks for no server.
        kv_used_fraction=max(0.0, fleet.kv_used_tokens() - fleet.flex_kv_tokens()) / capacity if capacity else 0.0,
        waiting_requests=fleet.gateway.num_waiters(demand_only=True),
        ttft_p99_s=ttft,
        # no-backfill runs no bulk beside people: its servers follow people only.
        bulk=fleet.feed.demand(now) if fleet.variant.backfill else (),
    )


def in_ramp(t: float) -> bool:
    """Whether t falls in the morning ramp S6 judges time to first token over."""
    return RAMP[0] <= t % DAY < RAMP[1]


def next_probe_in(fleet: FluidFleet, t: float, probe: ProbeSettings) -> float:
    """Seconds to the probe after one at `t`: closer through the ramp and a surge."""
    focus = fleet.scenario.focus_s
    if focus is not None and focus[0] <= t < focus[1]:
        return min(probe.surge_every_s, probe.every_s)
    return min(probe.ramp_every_s, probe.every_s) if in_ramp(t) else probe.every_s


def probe_now(fleet: FluidFleet, now: float, probe: ProbeSettings, seed: int) -> None:
    ready = max(fleet.servers.ready, 1)
    interactive, bulk = fleet.in_flight()
    _, duration = fleet.durations() if fleet.servers.ready else (0.0, 1.0)
    rate = interactive / duration / ready if interactive else fleet.scenario.rate_at(now) / ready
    seats = fleet.settings.engine.kv_capacity_tokens / fleet.m.lease_mean
    with_bulk = fleet.variant.backfill and bulk >= 0.1 * seats * ready
    result = run_probe(
        fleet.scenario,
        fleet.settings,
        rate_per_server=rate,
        bulk_teams=fleet.bulk_teams() if with_bulk else (),
        cell=probe.cell,
        warmup_s=probe.warmup_s,
        window_s=probe.ramp_window_s if in_ramp(now) else probe.window_s,
        seed=seed,
        class_mix=fleet.class_mix(),
    )
    fleet.use_probe(result)
    fleet.recorder.count("probes")


def run_fast(
    scenario: Scenario,
    settings: SimSettings,
    policy: ScalingPolicy,
    variant: Variant,
    seed: int,
    probe: ProbeSettings | None = None,
    dt: float = 4.0,
) -> Recorder:
    probe = probe or ProbeSettings()
    fleet = FluidFleet(scenario, settings, variant, seed)
    pending = deque(scenario.batches())
    while pending and pending[0].arrival_s <= 0:
        fleet.add_batch(pending.popleft(), 0.0)
    capacity_seats = settings.engine.kv_capacity_tokens / fleet.m.lease_mean
    _, duration = fleet.durations()
    guess = math.ceil(scenario.rate_at(0.0) * duration / capacity_seats / 0.8) + 1
    for _ in range(min(max(guess, settings.min_copies), scenario.gpus)):
        fleet.servers.add(0.0, ready_at=0.0)
    # The last minute's arrivals, as a fleet running since yesterday would have counted them.
    for request_class, share in scenario.class_mix:
        fleet.gateway.arrivals.append(
            (-1.0, request_class, round(scenario.rate_at(0.0) * share * settings.rate_window_s))
        )
    target = min(max(policy.decide(fluid_signals(fleet, 0.0)).target, settings.min_copies), scenario.gpus)
    fleet.servers.scale_to(target, 0.0, 0.0, 0.0)
    probe_now(fleet, 0.0, probe, seed)
    interval = settings.autoscaler.interval_s
    next_scale, next_sample, next_probe = interval, 0.0, probe.every_s
    next_failure = _next_failure(fleet, 0.0)
    drain_s = 3 * fleet.m.reply_mean * fleet.step_s
    focus = scenario.focus_s
    t = 0.0
    while t < scenario.duration_s:
        while pending and pending[0].arrival_s <= t:
            fleet.add_batch(pending.popleft(), t)
        if t >= next_sample:
            _sample(fleet, t, target)
            next_sample += settings.sample_interval_s
        fleet.tick(t, dt)
        t += dt
        if t >= next_scale:
            target = policy.decide(fluid_signals(fleet, t)).target
            fleet.servers.scale_to(target, t, scenario.startup_s, drain_s)
            next_scale += interval
        if t >= next_probe:
            probe_now(fleet, t, probe, seed + int(t))
            next_probe += next_probe_in(fleet, t, probe)
        # A surge's first probe as soon as it has run a probe's warm-up, not at the next slot.
        if focus is not None and t < focus[0] + probe.warmup_s <= t + dt:
            next_probe = min(next_probe, focus[0] + probe.warmup_s)
        if next_failure is not None and t >= next_failure:
            if fleet.servers.fail_one(fleet.rng):
                interactive, bulk = fleet.in_flight()
                fleet.recorder.count("failures")
                fleet.recorder.count("retried", (interactive + bulk) / max(fleet.servers.ready + 1, 1))
            next_failure = _next_failure(fleet, t)
    if fleet.probe is not None:
        fleet.use_probe(fleet.probe)
    return fleet.recorder


def _next_failure(fleet: FluidFleet, now: float) -> float | None:
    rate = fleet.scenario.failures_per_server_hour * max(fleet.servers.ready, 1) / 3600.0
    if rate <= 0:
        return None
    t = now + fleet.rng.expovariate(rate)
    return t if t < fleet.scenario.duration_s else None


def _sample(fleet: FluidFleet, now: float, target: int) -> None:
    capacity = fleet.capacity_tokens()
    backlog, at_risk = fleet.feed.backlog(now)
    servers = fleet.servers
    fleet.recorder.sample(
        FleetSample(
            t=now,
            interactive_rate=fleet.scenario.rate_at(now),
            ready=servers.ready,
            starting=servers.starting,
            draining=servers.draining,
            target=target,
            kv_used_fraction=fleet.kv_used_tokens() / capacity if capacity else 0.0,
            bulk_backlog=backlog,
            bulk_at_risk=at_risk,
            ttft_p99_s=fleet.ttft.demand.every.percentile(0.99) if fleet.probe is not None else None,
            interactive_servers=fleet.interactive_kv_tokens() / fleet.settings.engine.kv_capacity_tokens,
        )
    )
