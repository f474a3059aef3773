"""The exact mode's world: every server step-level (`SimServer`), every request on its own.

Requests go the way they go live: the gateway asks `SharePolicy` (team leases held here; flex
its own rule, `team_leases.py`), the router's `RoutingPolicy` picks a ready server, the
engine's `Scheduler` runs it step by step behind the server's tier gate; the dispatcher's
`RoomPolicy` and `ReleaseOrder` release bulk; the autoscaler's decision starts servers (ready
after `startup_s`) or drains them. Events (`exact_events.py`) call in here.

The gateway's queue holds people's requests the pool has no room for, by class: priority's
retried before interactive's, and flex's only once neither waits; priority and interactive
get a 503 after `queue_timeout_s`, flex a 429 after `flex_wait_s`.
"""

from __future__ import annotations

import itertools
import random
from collections import deque

from autoscaler.signals import ScalingPolicy
from bulk.release_policy import DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from contracts.service_tier import RequestClass
from engine.request import RequestClass as EngineClass
from fleet_state.server_state import ServerState
from quota.shares import Decision, SharePolicy
from router.routing_policy import RoutingPolicy
from simulator.bulk_feed import BulkFeed, SimBatch
from simulator.cost_model import read_alone_s
from simulator.events import Event
from simulator.histogram import Histogram
from simulator.length_moments import moments
from simulator.recorder import CHAT_PROMPT_TOKENS, BatchOutcome, Recorder, TtftSample
from simulator.scenario import BatchPlan, Scenario
from simulator.settings import SimSettings
from simulator.sim_request import BULK, FLEX, PRIORITY, SHAPED_CLASSES, SimRequest
from simulator.sim_server import SimServer
from simulator.step_end import StepEnd
from simulator.team_leases import TeamLeases
from simulator.variants import Variant

PAID = (ServerState.STARTING, ServerState.READY, ServerState.DRAINING)


class ExactFleet:
    """Servers, leases, waiters and batches of one exact run; the events' handlers live here."""

    def __init__(
        self,
        scenario: Scenario,
        settings: SimSettings,
        policy: ScalingPolicy,
        variant: Variant,
        seed: int,
        recorder: Recorder | None = None,
    ) -> None:
        self.scenario = scenario
        self.settings = settings
        self.policy = policy
        self.variant = variant
        self.rng = random.Random(seed)
        self.recorder = Recorder(scenario.hours, focus_s=scenario.focus_s) if recorder is None else recorder
        self.servers: dict[str, SimServer] = {}
        self.routing = RoutingPolicy(load_factor=settings.load_factor, block_size=settings.engine.block_size)
        weights = {team.team_id: team.weight for team in scenario.teams}
        room = RoomPolicy(settings.reserve_fraction, settings.max_bulk_inflight)
        self.leases = TeamLeases(SharePolicy(weights), settings.pool_id, room)
        self.feed = BulkFeed(room, ReleaseOrder(weights), DeadlineRisk(), entry_requests=1)
        self.feed_batches: dict[str, SimBatch] = {}
        # People's requests with no room yet (FLEET_FULL, or no room for flex), by class.
        self.waiters: dict[RequestClass, deque[SimRequest]] = {c: deque() for c in SHAPED_CLASSES}
        self.homeless: deque[SimRequest] = deque()  # admitted, their server died, none ready yet
        self.arrivals: deque[tuple[float, RequestClass]] = deque()
        self.window_ttft = Histogram()  # the demand classes', since the last autoscaler tick
        self.target = 0
        self.heads: dict[tuple[str, int], SimRequest] = {}  # (batch, index): sampled, not yet released
        self._ids = itertools.count()
        self._server_ids = itertools.count()
        self._accounted_at = 0.0
        self._dead_kv_token_s = 0.0
        self._read_s: dict[int, float] = {}  # prompt tokens -> its read alone (cost model)
        self._teams = [t.team_id for t in scenario.teams]
        self._team_shares = [t.interactive_share for t in scenario.teams]
        self._classes = [c for c, _ in scenario.class_mix]
        self._class_shares = [share for _, share in scenario.class_mix]
        self.mean_request_tokens = moments(scenario, settings.engine.block_size).lease_mean

    # -- servers ------------------------------------------------------------------------------

    def in_state(self, state: ServerState) -> list[SimServer]:
        return [s for s in self.servers.values() if s.state is state]

    def account(self, now: float) -> None:
        """Add GPU-seconds by state since the last change (call before any state change)."""
        dt = now - self._accounted_at
        if dt > 0:
            paid = sum(1 for s in self.servers.values() if s.state in PAID)
            ready = sum(1 for s in self.servers.values() if s.state is ServerState.READY)
            rec = self.recorder
            rec.paid_gpu_s += paid * dt
            rec.ready_gpu_s += ready * dt
            rec.kv_capacity_token_s += paid * dt * self.settings.engine.kv_capacity_tokens
            rec.peak_servers = max(rec.peak_servers, paid)
        self._accounted_at = now

    def add_server(self, now: float, ready: bool) -> SimServer:
        self.account(now)
        server = SimServer(f"s{next(self._server_ids)}", self.settings.engine, self.settings.cost, now)
        if ready:
            server.state, server.ready_s = ServerState.READY, now
        self.servers[server.server_id] = server
        return server

    def stop(self, server: SimServer, now: float) -> None:
        self.account(now)
        server.state = ServerState.DEAD
        self._dead_kv_token_s += server.kv_token_s
        del self.servers[server.server_id]

    def capacity_tokens(self) -> int:
        return sum(s.kv_capacity_tokens for s in self.in_state(ServerState.READY))

    def finish_run(self, now: float) -> Recorder:
        self.account(now)
        self.recorder.kv_token_s = self._dead_kv_token_s + sum(s.kv_token_s for s in self.servers.values())
        return self.recorder

    # -- requests -----------------------------------------------------------------------------

    def new_interactive(self, now: float) -> SimRequest:
        """A person's request: its class from the scenario's mix (no draw when there is one
        class, so a day without tiers draws what it always drew), its team, its lengths."""
        classes = self._classes
        request_class = classes[0] if len(classes) == 1 else self.rng.choices(classes, self._class_shares)[0]
        team = self.rng.choices(self._teams, self._team_shares)[0]
        return SimRequest(
            f"i{next(self._ids)}",
            team,
            request_class,
            self.scenario.prompt.sample(self.rng),
            self.scenario.reply.sample(self.rng),
            now,
        )

    def demand_waiting(self) -> int:
        """Priority and interactive requests waiting at the gateway."""
        return sum(len(q) for c, q in self.waiters.items() if c != FLEX)

    def num_waiting(self) -> int:
        return sum(len(q) for q in self.waiters.values())

    def admit(self, request: SimRequest, now: float) -> bool | None:
        """True admitted, False refused (429), None no room yet: flex by its rule (only on room
        the higher tiers leave, none of theirs waiting), the others by the share policy."""
        if request.request_class == FLEX:
            if self.demand_waiting() or not self.leases.flex_fits(request.lease_tokens, self.capacity_tokens()):
                return None
            self.leases.take_flex(request.lease_tokens)
            return True
        interactive = not request.is_bulk
        priority = request.request_class == PRIORITY
        decision = self.leases.decide(
            request.team_id, request.lease_tokens, interactive, self.capacity_tokens(), now, priority=priority
        )
        if decision.admitted:
            request.borrowed = decision is Decision.BORROW
            return True
        if decision is Decision.FLEET_FULL:
            return None
        return False

    def route(self, request: SimRequest, now: float, exclude: tuple[str, ...] = ()) -> list[Event[ExactFleet]]:
        """Send an admitted request to the server the router picks (or hold it until one is ready)."""
        ready = self.in_state(ServerState.READY)
        loads = [s.load(s.sent_tokens, s.sent_requests) for s in ready]
        # What outranks bulk (people's work, flex) may take the room of the engine's bulk class.
        choice = self.routing.choose(loads, request.lease_tokens, {}, exclude, displace_bulk=not request.is_bulk)
        if choice is None:
            self.homeless.append(request)
            return []
        server = self.servers[choice.server_id]
        server.sent_tokens += request.lease_tokens
        server.sent_requests += 1
        server.add(request)
        return self.kick(server, now)

    def kick(self, server: SimServer, now: float) -> list[Event[ExactFleet]]:
        """Start the server's next step if it is idle."""
        if server.stepping:
            return []
        return self.next_step(server, now)

    def next_step(self, server: SimServer, now: float) -> list[Event[ExactFleet]]:
        step_s = server.begin_step()
        if step_s is None:
            server.stepping = False
            if server.state is ServerState.DRAINING:
                self.stop(server, now)
            return []
        server.stepping = True
        return [StepEnd(now + step_s, server)]

    def on_token(self, request: SimRequest, now: float, gap: float | None) -> None:
        if request.is_bulk:
            return
        if gap is None:
            ttft = now - request.arrival_s
            prompt = request.prompt_tokens
            read = self._read_s.get(prompt)
            if read is None:
                read = self._read_s[prompt] = read_alone_s(
                    self.settings.cost, prompt, self.settings.engine.max_num_batched_tokens
                )
            sample = TtftSample(ttft, prompt <= CHAT_PROMPT_TOKENS, max(ttft - read, 0.0), request.request_class)
            self.recorder.first_token(request.arrival_s, sample)
            if request.is_demand:
                self.window_ttft.add(ttft)
        else:
            self.recorder.gap(now, gap)

    def step_end(self, server: SimServer, now: float) -> list[Event[ExactFleet]]:
        result = server.end_step(now, self.on_token)
        if result.preempted:
            self.recorder.count("preempted", result.preempted)
        withdrawn = result.withdrawn
        if withdrawn.flex:
            self.recorder.count("flex_preempted", withdrawn.flex)
        if withdrawn.bulk or withdrawn.borrowed:
            self.recorder.count("preempted", withdrawn.bulk + withdrawn.borrowed)
        for request in result.finished:
            self.finished(request, now)
        for request in result.aborted:
            self.recorder.count("aborted")
            self.release_lease(request)
        events = self.next_step(server, now)
        if (result.finished or result.aborted) and self.num_waiting():
            events += self.retry_waiters(now)
        return events

    def wait(self, request: SimRequest) -> None:
        """No room yet: the request waits at the gateway (a team's waiter, flex's apart)."""
        self.waiters[request.request_class].append(request)
        if request.request_class != FLEX:
            self.leases.waiters[request.team_id] += 1

    def retry_waiters(self, now: float) -> list[Event[ExactFleet]]:
        """The gateway's queue: waiters retry, highest class first and first come first served
        within one, when room frees (a lease ends) and every dispatcher tick. Priority and
        interactive get a 503 after `queue_timeout_s`; flex is tried only once neither waits,
        and gets a 429 after `flex_wait_s`."""
        events: list[Event[ExactFleet]] = []
        waiting = self.leases.waiters
        for request_class, queue in self.waiters.items():
            flex = request_class == FLEX
            timeout_s = self.settings.flex_wait_s if flex else self.settings.queue_timeout_s
            while queue:
                request = queue[0]
                if now - request.arrival_s > timeout_s:
                    queue.popleft()
                    if not flex:
                        waiting[request.team_id] -= 1
                    self.recorder.count("flex_refused" if flex else f"{request_class}_timed_out")
                    continue
                if flex and self.demand_waiting():
                    break
                if not flex:
                    waiting[request.team_id] -= 1
                admitted = self.admit(request, now)
                if admitted is None:
                    if not flex:
                        waiting[request.team_id] += 1
                    break
                queue.popleft()
                if admitted:
                    if flex:
                        self.recorder.count("flex_waited")
                        self.recorder.flex_wait.add(now - request.arrival_s)
                    events += self.route(request, now)
                else:
                    self.recorder.count(f"{request_class}_refused")
        return events

    def count_in_flight(self, dt: float) -> None:
        """Request-seconds in flight by class over the last `dt` (with the finishes counted in
        the same window, Little's law gives how long a request holds its lease)."""
        counts = dict.fromkeys(self.recorder.class_ttft, 0)
        bulk = 0
        for server in self.servers.values():
            for request in server.requests.values():
                if request.is_bulk:
                    bulk += 1
                else:
                    counts[request.request_class] += 1
        for request_class, count in counts.items():
            self.recorder.count(f"{request_class}_in_flight_s", count * dt)
        self.recorder.count("bulk_in_flight_s", bulk * dt)

    def release_lease(self, request: SimRequest) -> None:
        if request.request_class == FLEX:
            self.leases.release_flex(request.lease_tokens)
            return
        interactive = not request.is_bulk
        priority = request.request_class == PRIORITY
        self.leases.release(
            request.team_id, request.lease_tokens, borrowed=request.borrowed, interactive=interactive, priority=priority
        )

    def finished(self, request: SimRequest, now: float) -> None:
        self.release_lease(request)
        self.recorder.team_tokens[request.team_id] += request.prompt_tokens + request.reply_tokens
        window = now >= self.recorder.record_from_s
        if request.is_bulk:
            batch = self.feed_batches[request.batch_id or ""]
            self.feed.done(batch, 1, request.lease_tokens, now)
        self.recorder.count(f"{request.request_class}_done")
        self.recorder.count(f"{request.request_class}_done_in_window", window)

    # -- bulk ---------------------------------------------------------------------------------

    def add_batch(self, plan: BatchPlan, now: float) -> None:
        outcome = BatchOutcome(plan.batch_id, plan.team_id, plan.count, now + plan.deadline_s)
        self.recorder.batches[plan.batch_id] = outcome
        self.feed_batches[plan.batch_id] = self.feed.add(outcome, now, self.mean_request_tokens)

    def head(self, batch: SimBatch, _requests: int) -> int:
        """The lease of the batch's next entry (sampled once, kept until released)."""
        batch_id = batch.outcome.batch_id
        key = (batch_id, batch.released)
        request = self.heads.get(key)
        if request is None:
            prompt, reply = self.scenario.prompt.sample(self.rng), self.scenario.reply.sample(self.rng)
            request = SimRequest(
                f"b{next(self._ids)}", batch.outcome.team_id, BULK, prompt, reply, 0.0, batch_id,
                bulk_lease_fraction=self.settings.bulk_lease_fraction,
            )  # fmt: skip
            self.heads[key] = request
        return request.lease_tokens

    def pool_load(self) -> PoolLoad:
        ready = self.in_state(ServerState.READY)
        return PoolLoad(
            pool_id=self.settings.pool_id,
            capacity_tokens=sum(s.kv_capacity_tokens for s in ready),
            leased_tokens=self.leases.leased_tokens,
            bulk_inflight_tokens=self.feed.inflight_tokens,
            bulk_inflight_requests=self.feed.inflight_requests,
            interactive_waiting=self.demand_waiting(),  # flex takes freed room as leases end
            interactive_running=sum(s.scheduler.num_unfinished(EngineClass.INTERACTIVE) for s in ready),
        )
