"""The exact mode's control loops: the gateway's arrivals and waiters, the dispatcher's tick,
the autoscaler's tick and what its decision does to servers, failures and the minute sample."""

from __future__ import annotations

from autoscaler.signals import PoolSignals
from fleet_state.server_state import ServerState
from simulator.events import Event
from simulator.exact_fleet import ExactFleet
from simulator.histogram import Histogram
from simulator.recorder import FleetSample
from simulator.sim_request import SHAPED_CLASSES
from simulator.sim_server import SimServer

Events = list[Event[ExactFleet]]


def next_arrival(world: ExactFleet, now: float) -> float | None:
    """The next interactive arrival after `now` (non-homogeneous Poisson by thinning), or None
    past the end of the run."""
    scenario, rng = world.scenario, world.rng
    top = scenario.max_rate()
    if top <= 0:
        return None
    t = now
    while True:
        t += rng.expovariate(top)
        if t >= scenario.duration_s:
            return None
        if rng.random() * top <= scenario.rate_at(t):
            return t


def arrive(world: ExactFleet, now: float) -> Events:
    request = world.new_interactive(now)
    world.arrivals.append((now, request.request_class))
    world.recorder.count(f"{request.request_class}_arrived")
    admitted = world.admit(request, now)
    if admitted is None:
        world.wait(request)
        return []
    if not admitted:
        world.recorder.count(f"{request.request_class}_refused")
        return []
    return world.route(request, now)


def dispatch(world: ExactFleet, now: float) -> Events:
    """Retry the gateway's waiters (FIFO, 503 after the queue timeout), re-home requests whose
    server died, then release bulk into the room left."""
    events: Events = []
    if now >= world.recorder.record_from_s:
        world.count_in_flight(world.settings.dispatch_interval_s)
    while world.homeless and world.in_state(ServerState.READY):
        events += world.route(world.homeless.popleft(), now)
    events += world.retry_waiters(now)
    if world.variant.backfill:
        events += release_bulk(world, now)
    return events


def release_bulk(world: ExactFleet, now: float) -> Events:
    """Release what the dispatcher's policies allow; admission may still say no to an entry,
    which then goes back to its batch with every entry released after it (newest first)."""
    events: Events = []
    releases = world.feed.release(world.pool_load(), now, world.head)
    for i, release in enumerate(releases):
        request = world.heads[(release.batch.outcome.batch_id, release.first)]
        request.arrival_s = now
        if not world.admit(request, now):
            for undone in reversed(releases[i:]):
                world.feed.returned(undone.batch, undone.requests, undone.tokens)
            break
        del world.heads[(release.batch.outcome.batch_id, release.first)]
        events += world.route(request, now)
    return events


def signals(world: ExactFleet, now: float) -> PoolSignals:
    settings = world.settings
    while world.arrivals and world.arrivals[0][0] < now - settings.rate_window_s:
        world.arrivals.popleft()
    rates = dict.fromkeys(SHAPED_CLASSES, 0.0)
    for _, request_class in world.arrivals:
        rates[request_class] += 1.0 / settings.rate_window_s
    ready = world.in_state(ServerState.READY)
    used = sum(s.kv_used_tokens - s.flex_kv_tokens for s in ready)  # flex fills what runs
    capacity = sum(s.kv_capacity_tokens for s in ready)
    # The demand classes' waiting, at the gateway and in the engines: flex waits by design.
    waiting = world.demand_waiting() + sum(s.num_waiting_demand for s in ready)
    ttft = world.window_ttft.percentile(0.99)
    world.window_ttft = Histogram()
    return PoolSignals(
        pool_id=settings.pool_id,
        now=now,
        ready=len(ready),
        starting=len(world.in_state(ServerState.STARTING)),
        draining=len(world.in_state(ServerState.DRAINING)),
        arrival_rates=rates,
        kv_used_fraction=used / capacity if capacity else 0.0,
        waiting_requests=waiting,
        ttft_p99_s=ttft,
        # no-backfill runs no bulk beside people: its servers follow people only.
        bulk=world.feed.demand(now) if world.variant.backfill else (),
    )


def autoscale(world: ExactFleet, now: float) -> tuple[Events, list[SimServer]]:
    """Ask the policy; start servers (ready after startup_s) or take the excess away: starting
    ones first (newest first), then drain the ready ones holding the fewest requests."""
    decision = world.policy.decide(signals(world, now))
    world.target = decision.target
    starting = world.in_state(ServerState.STARTING)
    ready = world.in_state(ServerState.READY)
    change = decision.target - len(starting) - len(ready)
    started: list[SimServer] = []
    for _ in range(max(change, 0)):
        started.append(world.add_server(now, ready=False))
    excess = max(-change, 0)
    for server in sorted(starting, key=lambda s: -s.created_s)[:excess]:
        world.stop(server, now)
        excess -= 1
    events: Events = []
    for server in sorted(ready, key=lambda s: (len(s.requests), s.server_id))[:excess]:
        world.account(now)
        server.state = ServerState.DRAINING
        world.recorder.count("drained")
        events += world.kick(server, now)  # an idle server stops at once
    return events, started


def server_ready(world: ExactFleet, server: SimServer, now: float) -> Events:
    if server.state is not ServerState.STARTING:
        return []  # cancelled while starting
    world.account(now)
    server.state, server.ready_s = ServerState.READY, now
    events: Events = []
    while world.homeless:
        events += world.route(world.homeless.popleft(), now)
    return events


def fail_one(world: ExactFleet, now: float) -> tuple[Events, float | None]:
    """A random ready server dies; its requests are retried on others (from the tokens sent)."""
    ready = sorted(world.in_state(ServerState.READY), key=lambda s: s.server_id)
    events: Events = []
    if ready:
        server = world.rng.choice(ready)
        world.account(now)
        world.recorder.count("failures")
        orphans = server.evict_all()
        world.stop(server, now)
        for request in orphans:
            request.retries += 1
            world.recorder.count("retried")
            events += world.route(request, now, exclude=(server.server_id,))
    return events, next_failure(world, now)


def next_failure(world: ExactFleet, now: float) -> float | None:
    rate_per_s = world.scenario.failures_per_server_hour * max(world.target, 1) / 3600.0
    if rate_per_s <= 0:
        return None
    t = now + world.rng.expovariate(rate_per_s)
    return t if t < world.scenario.duration_s else None


def sample(world: ExactFleet, now: float) -> None:
    ready = world.in_state(ServerState.READY)
    capacity = sum(s.kv_capacity_tokens for s in ready)
    backlog, at_risk = world.feed.backlog(now)
    world.recorder.sample(
        FleetSample(
            t=now,
            interactive_rate=world.scenario.rate_at(now),
            ready=len(ready),
            starting=len(world.in_state(ServerState.STARTING)),
            draining=len(world.in_state(ServerState.DRAINING)),
            target=world.target,
            kv_used_fraction=sum(s.kv_used_tokens for s in ready) / capacity if capacity else 0.0,
            bulk_backlog=backlog,
            bulk_at_risk=at_risk,
            ttft_p99_s=world.recorder.recent_ttft.percentile(0.99),
            interactive_servers=interactive_kv(ready) / world.settings.engine.kv_capacity_tokens,
        )
    )


def interactive_kv(servers: list[SimServer]) -> int:
    """KV tokens held by the demand classes' requests (borrowed ones included) on `servers`:
    what people need servers for."""
    held = 0
    for server in servers:
        block_size = server.config.block_size
        for seq in server.scheduler.unfinished():
            if server.requests[seq.request_id].is_demand:
                held += len(seq.block_table) * block_size
    return held
