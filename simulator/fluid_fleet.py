"""The fast mode's fleet: requests as flows, servers as counts, the policies still the real ones.

Every `dt` (4 s), in four 1-s slices (`FluidFleet.tick`), the fluid fleet:

    arrivals    Poisson(rate × slice) people's requests, split across classes and teams
    admission   the gateway's queue (`fluid_gateway.py`): SharePolicy.decide per team for
                priority, then interactive, on slices of the waiting requests (leases held
                here as in the exact mode), no room: they wait, 503 after 5 s; flex on the room
                those leave, 429 after its bounded wait
    service     in-flight requests end at rate 1 / duration, the duration from the probe (its
                class's) or the cost model (Little's law: in flight = rate × duration), half of
                each slice's endings before its arrivals and half after
    bulk        RoomPolicy + ReleaseOrder release chunks of a batch into the room left
    latency     each admitted request's TTFT = its gateway wait + a draw from the latest probe's
                requests of its class (`probe.py`: step-level servers at this load,
                `probe_ttft.py`); inter-token gaps from the probe

The autoscaler, its ticks and the servers' lifecycle are as in the exact mode (`fluid_run.py`).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from autoscaler.demand_classes import DEMAND_CLASSES
from bulk.release_policy import DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from contracts.service_tier import RequestClass
from quota.shares import Decision, SharePolicy
from simulator.bulk_feed import BulkFeed, SimBatch
from simulator.fluid_gateway import FluidGateway
from simulator.fluid_servers import FluidServers
from simulator.length_moments import Moments, moments
from simulator.probe import ProbeResult
from simulator.probe_ttft import ProbeTtft
from simulator.recorder import BatchOutcome, Recorder
from simulator.scenario import BatchPlan, ClassMix, Scenario
from simulator.settings import SimSettings
from simulator.sim_request import FLEX, PRIORITY
from simulator.team_leases import TeamLeases
from simulator.variants import Variant

SLICES = 4  # a tick's arrivals, admission and bulk release go in slices of dt / 4


@dataclass(slots=True)
class Flow:
    """Requests in flight that share a lease kind: how many, and the lease tokens they hold."""

    requests: float = 0.0
    tokens: float = 0.0
    done_carry: float = 0.0  # finished requests not yet reported whole (bulk batches)


class FluidFleet:
    """The state of one fast run (see the module docstring); `fluid_run.py` drives it."""

    def __init__(self, scenario: Scenario, settings: SimSettings, variant: Variant, seed: int) -> None:
        self.scenario = scenario
        self.settings = settings
        self.variant = variant
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.recorder = Recorder(scenario.hours, focus_s=scenario.focus_s)
        self.m: Moments = moments(scenario, settings.engine.block_size)
        self.bulk_lease_mean = self.m.lease_mean * settings.bulk_lease_fraction  # a bulk request's lease
        self.servers = FluidServers(self.recorder, settings.engine.kv_capacity_tokens)
        weights = {team.team_id: team.weight for team in scenario.teams}
        room = RoomPolicy(settings.reserve_fraction, settings.max_bulk_inflight)
        self.leases = TeamLeases(SharePolicy(weights), settings.pool_id, room)
        self.feed = BulkFeed(room, ReleaseOrder(weights), DeadlineRisk(), max(1, scenario.gpus // 8))
        # People's requests in flight by (class, team, borrowed); bulk's by (batch, borrowed).
        self.interactive: dict[tuple[RequestClass, str, bool], Flow] = defaultdict(Flow)
        self.bulk: dict[tuple[str, bool], Flow] = defaultdict(Flow)
        self.batches: dict[str, SimBatch] = {}
        self.gateway = FluidGateway(scenario, settings, self.leases, self.recorder, self.np_rng, self.m.lease_mean)
        self.step_s = settings.cost.step_s(0, 1, 0)
        self.ttft = ProbeTtft(self.recorder, self.rng)
        self.pending_tokens: dict[int, float] = defaultdict(float)  # hour -> tokens at the probe's gaps

    @property
    def probe(self) -> ProbeResult | None:
        """The latest probe (its latencies stand for every server's until the next)."""
        return self.ttft.probe

    # -- totals -------------------------------------------------------------------------------

    def in_flight(self) -> tuple[float, float]:
        return sum(f.requests for f in self.interactive.values()), sum(f.requests for f in self.bulk.values())

    def class_mix(self) -> ClassMix:
        """People's requests in flight by class, as shares (the probe's mix); the scenario's
        before any is admitted."""
        by_class: dict[RequestClass, float] = defaultdict(float)
        for (request_class, _, _), flow in self.interactive.items():
            by_class[request_class] += flow.requests
        total = sum(by_class.values())
        if len(self.scenario.class_mix) == 1 or total <= 0:
            return self.scenario.class_mix
        return tuple((c, n / total) for c, n in by_class.items() if n > 0)

    def capacity_tokens(self) -> int:
        return self.servers.ready * self.settings.engine.kv_capacity_tokens

    def held_per_leased(self) -> float:
        """KV held per lease token in flight: a request holds its prompt, the reply so far and
        its last block's slack, of a lease of prompt + max_tokens: ~0.91 of it over a request's
        life at the brief's lengths. Counted on the leases, which admission and the dispatcher
        hold exactly, rather than on the fluid's request counts, whose mix of fresh and old
        requests moves with every release. Not from the probes: admitted by lease, a request
        finds its blocks at once, and a few minutes of 4 servers measure the documents they
        happened to draw more than anything else."""
        return self.m.kv_in_flight / self.m.lease_in_flight

    @staticmethod
    def leased_tokens(flows: dict[tuple[RequestClass, str, bool], Flow] | dict[tuple[str, bool], Flow]) -> float:
        """Lease tokens the flows hold."""
        return sum(f.tokens for f in flows.values())

    def kv_used_tokens(self) -> float:
        """KV held: people's leases and bulk's (which lease `bulk_lease_fraction` of what they
        may hold) at `held_per_leased`; never more than the ready servers have (beyond it, the
        engine preempts bulk: the probes' bulk durations carry that)."""
        bulk = self.leased_tokens(self.bulk) / self.settings.bulk_lease_fraction
        leased = self.leased_tokens(self.interactive) + bulk
        return min(float(self.capacity_tokens()), leased * self.held_per_leased())

    def flex_kv_tokens(self) -> float:
        """KV flex's requests hold (see `held_per_leased`)."""
        return sum(f.tokens for (c, _, _), f in self.interactive.items() if c == FLEX) * self.held_per_leased()

    def interactive_kv_tokens(self) -> float:
        """KV the demand classes' requests hold (see `held_per_leased`): what people need
        servers for (flex fills what runs)."""
        demand = sum(f.tokens for (c, _, _), f in self.interactive.items() if c in DEMAND_CLASSES)
        return demand * self.held_per_leased()

    def bulk_teams(self) -> tuple[str, ...]:
        """The teams with bulk in flight, in name order."""
        return tuple(sorted({self.batches[batch].outcome.team_id for batch, _ in self.bulk}))

    def num_waiters(self) -> int:
        return self.gateway.num_waiters()

    # -- one tick -----------------------------------------------------------------------------

    def tick(self, now: float, dt: float) -> None:
        """One tick in `SLICES` slices, each split around its middle (Strang splitting): half
        the slice's endings; its arrivals, their admission and the dispatcher's release; the
        other half of its endings. KV held is counted either side of the middle. Durations and
        the probe's figures hold for the whole tick.

        Arrivals spread over a slice land on average at its middle. Admitting a whole tick's
        arrivals at its start and ending a tick's share afterwards would count the stock at
        the top of its sawtooth: at dt = 4 s and 10-s requests, a fifth more in flight than
        rate × duration, and a fleet that much fuller to admission, the dispatcher and the busy
        measure. Admission asks the share policy for a slice's arrivals at once, so a slice
        must be small beside a team's stock (1 s of arrivals is a tenth of it), or a team near
        its share is refused what it would have got one request at a time; and the dispatcher
        releases every slice, as the live one does every second.
        """
        self.servers.advance(now, dt)
        ready = self.servers.ready > 0
        step, duration = self.durations() if ready else (self.step_s, 0.0)
        probe = self.probe
        people_s = {c: probe.duration_s(c) or duration if probe else duration for c, _ in self.scenario.class_mix}
        bulk_s = probe.duration_s("bulk") or duration if probe else duration
        part = dt / SLICES
        for i in range(SLICES):
            at = now + i * part
            if ready:
                self.serve_people(at, part / 2, step, people_s)
                self.serve_bulk(at, part / 2, bulk_s)
            before = self.kv_used_tokens()
            self.gateway.arrive(at, part)
            self.gateway.admit(at, self.capacity_tokens(), self.admitted)
            if self.variant.backfill and ready:
                self.release_bulk(at)
            # The stock steps up by the slice's admissions at its middle: over the slice it
            # averages the levels either side of the step.
            self.recorder.kv_token_s += (before + self.kv_used_tokens()) / 2 * part
            if ready:
                self.serve_people(at + part / 2, part / 2, step, people_s)
                self.serve_bulk(at + part / 2, part / 2, bulk_s)

    def durations(self) -> tuple[float, float]:
        """(step seconds, request seconds) at the current seats per ready server: a fixed point,
        since the prompts read each step depend on how fast requests turn over."""
        m, ready = self.m, self.servers.ready
        interactive, bulk = self.in_flight()
        seats = (interactive + bulk) / ready if ready else 0.0
        step = self.step_s
        budget = self.settings.engine.max_num_batched_tokens
        for _ in range(3):
            duration = (m.reply_mean + math.ceil(m.prompt_mean / budget)) * step
            prefill = min(budget, seats * m.prompt_mean / duration * step) if seats else 0.0
            step = self.settings.cost.step_s(round(prefill), round(seats), round(seats * m.kv_in_flight))
        self.step_s = step
        return step, (m.reply_mean + math.ceil(m.prompt_mean / budget)) * step

    def serve_people(self, now: float, dt: float, step: float, duration_s: dict[RequestClass, float]) -> None:
        """People's requests in flight end at rate 1 / their class's duration over `dt`; their
        tokens count toward the hour's inter-token gaps."""
        shares = {c: 1.0 - math.exp(-dt / d) for c, d in duration_s.items()}
        ebb = self.m.lease_mean / self.m.lease_in_flight  # leases ebb slower than requests
        per_request = self.m.prompt_mean + self.m.reply_mean
        tokens = 0.0
        for (request_class, team, borrowed), flow in self.interactive.items():
            share = shares[request_class]
            ended, freed = flow.requests * share, flow.tokens * share * ebb
            tokens += flow.requests * dt / step
            flow.requests -= ended
            flow.tokens -= freed
            if request_class == FLEX:
                self.leases.release_flex(round(freed))
            else:
                priority = request_class == PRIORITY
                self.leases.release(team, round(freed), borrowed=borrowed, interactive=True, priority=priority)
            self.recorder.team_tokens[team] += ended * per_request
            self.recorder.count(f"{request_class}_done", ended)
        self.pending_tokens[min(int(now // 3600), self.recorder.num_hours - 1)] += tokens

    def serve_bulk(self, now: float, dt: float, duration_s: float) -> None:
        """Bulk in flight ends likewise; whole requests done are reported to their batches, and
        a flow whose last request ended is dropped."""
        share = 1.0 - math.exp(-dt / duration_s)
        ebb = self.m.lease_mean / self.m.lease_in_flight
        per_request = self.m.prompt_mean + self.m.reply_mean
        emptied: list[tuple[str, bool]] = []
        for key, flow in self.bulk.items():
            batch = self.batches[key[0]]
            ended, freed = flow.requests * share, flow.tokens * share * ebb
            if flow.requests - ended < 0.5:  # its last request: a flow's tail never decays to 0
                ended, freed = flow.requests, flow.tokens
            flow.requests -= ended
            flow.tokens -= freed
            flow.done_carry += ended
            # Whole requests done; a flow emptied rounds (each got whole requests released).
            whole = round(flow.done_carry) if flow.requests <= 0 else int(flow.done_carry)
            flow.done_carry -= whole
            if flow.requests <= 0:
                emptied.append(key)
            self.leases.release(batch.outcome.team_id, round(freed), borrowed=key[1], interactive=False)
            if whole:
                self.feed.done(batch, whole, round(whole * self.bulk_lease_mean), now)
            self.recorder.team_tokens[batch.outcome.team_id] += ended * per_request
            self.recorder.count("bulk_done", ended)
        for key in emptied:
            del self.bulk[key]
        # The dispatcher's in-flight figures are the flows' (whole-request rounding would drift).
        self.feed.inflight_requests = round(sum(f.requests for f in self.bulk.values()))
        self.feed.inflight_tokens = round(self.leased_tokens(self.bulk))

    def admitted(
        self, request_class: RequestClass, team: str, borrowed: bool, arrived: float, now: float, count: int
    ) -> None:
        """A cohort the gateway admitted: into its flow, its first tokens at the probe's."""
        flow = self.interactive[(request_class, team, borrowed)]
        flow.requests += count
        flow.tokens += round(count * self.m.lease_mean)
        if now - arrived <= 0:
            self.ttft.served(request_class, arrived, count)
        else:
            self.ttft.waited(request_class, arrived, now - arrived, count)

    def release_bulk(self, now: float) -> None:
        interactive, _ = self.in_flight()
        load = PoolLoad(
            pool_id=self.settings.pool_id,
            capacity_tokens=self.capacity_tokens(),
            leased_tokens=self.leases.leased_tokens,
            bulk_inflight_tokens=self.feed.inflight_tokens,
            bulk_inflight_requests=self.feed.inflight_requests,
            interactive_waiting=self.gateway.num_waiters(demand_only=True),
            interactive_running=round(interactive),
        )
        releases = self.feed.release(load, now, lambda _batch, n: round(n * self.bulk_lease_mean))
        for i, release in enumerate(releases):
            batch = release.batch
            team = batch.outcome.team_id
            decision = self.leases.decide(team, release.tokens, False, self.capacity_tokens(), now)
            if not decision.admitted:  # back to their batches, this one and every one after it
                for undone in reversed(releases[i:]):
                    self.feed.returned(undone.batch, undone.requests, undone.tokens)
                break
            flow = self.bulk[(batch.outcome.batch_id, decision is Decision.BORROW)]
            flow.requests += release.requests
            flow.tokens += release.tokens

    def add_batch(self, plan: BatchPlan, now: float) -> None:
        outcome = BatchOutcome(plan.batch_id, plan.team_id, plan.count, now + plan.deadline_s)
        self.recorder.batches[plan.batch_id] = outcome
        self.batches[plan.batch_id] = self.feed.add(outcome, now, self.m.lease_mean)

    def use_probe(self, probe: ProbeResult) -> None:
        """Fold the traffic served since the last probe into the hours at that probe's
        latencies, then take the new probe's."""
        previous = self.probe
        if previous is not None:
            for hour, tokens in self.pending_tokens.items():
                if tokens and previous.itl.total:
                    self.recorder.itl[hour].merge(previous.itl, tokens / previous.itl.total)
        self.pending_tokens.clear()
        self.ttft.use(probe)
