"""The fast mode's fleet: requests as flows, servers as counts, the policies still the real ones.

Every `dt` (1 s) the fluid fleet:

    arrivals    Poisson(rate × dt) people's requests, split across teams
    admission   SharePolicy.decide per team, on slices of the waiting requests (leases held
                here as in the exact mode); no room: they wait at the gateway, 503 after 5 s
    service     in-flight requests end at rate 1 / duration, the duration from the cost model
                at the current seats per server (Little's law: in flight = rate × duration)
    bulk        RoomPolicy + ReleaseOrder release chunks of a batch into the room left
    latency     each admitted request's TTFT = its gateway wait + a draw from the latest probe
                (`probe.py`: step-level servers at this load); inter-token gaps from the probe

The autoscaler, its ticks and the servers' lifecycle are as in the exact mode (`fluid_run.py`).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from bulk.release_policy import DeadlineRisk, PoolLoad, ReleaseOrder, RoomPolicy
from fleet.sim.bulk_feed import BulkFeed, SimBatch
from fleet.sim.fluid_servers import FluidServers
from fleet.sim.histogram import Histogram
from fleet.sim.length_moments import Moments, moments
from fleet.sim.probe import ProbeResult
from fleet.sim.recorder import BatchOutcome, Recorder
from fleet.sim.scenario import BatchPlan, Scenario
from fleet.sim.settings import SimSettings
from fleet.sim.team_leases import TeamLeases
from fleet.sim.variants import Variant
from quota.shares import Decision, SharePolicy


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
        self.recorder = Recorder(scenario.hours)
        self.m: Moments = moments(scenario, settings.engine.block_size)
        self.servers = FluidServers(self.recorder, settings.engine.kv_capacity_tokens)
        weights = {team.team_id: team.weight for team in scenario.teams}
        self.leases = TeamLeases(SharePolicy(weights), settings.pool_id)
        room = RoomPolicy(settings.reserve_fraction, settings.max_bulk_inflight)
        self.feed = BulkFeed(room, ReleaseOrder(weights), DeadlineRisk(), max(1, scenario.gpus // 8))
        self.interactive: dict[tuple[str, bool], Flow] = defaultdict(Flow)  # (team, borrowed)
        self.bulk: dict[tuple[str, bool], Flow] = defaultdict(Flow)  # (batch, borrowed)
        self.batches: dict[str, SimBatch] = {}
        self.waiters: dict[str, deque[tuple[float, int]]] = {t.team_id: deque() for t in scenario.teams}
        self.arrivals: deque[tuple[float, int]] = deque()
        self.step_s = settings.cost.step_s(0, 1, 0)
        self.probe: ProbeResult | None = None
        self.probe_ttft = Histogram()  # the latest probe's, every prompt
        self.probe_ttft_chat = Histogram()  # ... chat-sized prompts
        self.pending_ttft: dict[int, float] = defaultdict(float)  # hour -> requests served at the probe's TTFT
        self.pending_tokens: dict[int, float] = defaultdict(float)  # hour -> tokens at the probe's gaps

    # -- totals -------------------------------------------------------------------------------

    def in_flight(self) -> tuple[float, float]:
        return sum(f.requests for f in self.interactive.values()), sum(f.requests for f in self.bulk.values())

    def capacity_tokens(self) -> int:
        return self.servers.ready * self.settings.engine.kv_capacity_tokens

    def kv_per_request(self) -> float:
        """KV an in-flight request holds: the latest probe's measure (requests queued in an
        engine hold none), else the duration-weighted mean of the lengths."""
        measured = self.probe.kv_per_request if self.probe is not None else None
        return measured if measured else self.m.kv_in_flight

    def kv_used_tokens(self) -> float:
        interactive, bulk = self.in_flight()
        return min(float(self.capacity_tokens()), (interactive + bulk) * self.kv_per_request())

    def num_waiters(self) -> int:
        return sum(n for q in self.waiters.values() for _, n in q)

    # -- one tick -----------------------------------------------------------------------------

    def tick(self, now: float, dt: float) -> None:
        self.servers.advance(now, dt)
        self.recorder.kv_token_s += self.kv_used_tokens() * dt
        if self.servers.ready:
            self.serve(now, dt)
        self.arrive(now, dt)
        self.admit_waiters(now)
        if self.variant.backfill and self.servers.ready:
            self.release_bulk(now)

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

    def serve(self, now: float, dt: float) -> None:
        step, duration = self.durations()
        probe = self.probe
        interactive_s = probe.interactive_duration_s if probe and probe.interactive_duration_s else duration
        bulk_s = probe.bulk_duration_s if probe and probe.bulk_duration_s else duration
        share = 1.0 - math.exp(-dt / interactive_s)
        ebb = self.m.lease_mean / self.m.lease_in_flight  # leases ebb slower than requests
        per_request = self.m.prompt_mean + self.m.reply_mean
        hour = min(int(now // 3600), self.recorder.num_hours - 1)
        tokens = 0.0
        for (team, borrowed), flow in self.interactive.items():
            ended, freed = flow.requests * share, flow.tokens * share * ebb
            tokens += flow.requests * dt / step
            flow.requests -= ended
            flow.tokens -= freed
            self.leases.release(team, round(freed), borrowed=borrowed, interactive=True)
            self.recorder.team_tokens[team] += ended * per_request
            self.recorder.count("interactive_done", ended)
        self.pending_tokens[hour] += tokens
        share = 1.0 - math.exp(-dt / bulk_s)
        for (batch_id, borrowed), flow in self.bulk.items():
            batch = self.batches[batch_id]
            ended, freed = flow.requests * share, flow.tokens * share * ebb
            flow.requests -= ended
            flow.tokens -= freed
            flow.done_carry += ended
            whole = int(flow.done_carry)
            flow.done_carry -= whole
            self.leases.release(batch.outcome.team_id, round(freed), borrowed=borrowed, interactive=False)
            self.feed.done(batch, whole, round(whole * batch.mean_request_tokens), now)
            self.recorder.team_tokens[batch.outcome.team_id] += ended * per_request
            self.recorder.count("bulk_done", ended)
        # The dispatcher's in-flight figures are the flows' (whole-request rounding would drift).
        self.feed.inflight_requests = round(sum(f.requests for f in self.bulk.values()))
        self.feed.inflight_tokens = round(sum(f.tokens for f in self.bulk.values()))

    def arrive(self, now: float, dt: float) -> None:
        count = int(self.np_rng.poisson(self.scenario.rate_at(now) * dt))
        self.arrivals.append((now, count))
        self.recorder.count("interactive_arrived", count)
        if count == 0:
            return
        teams = [t for t in self.scenario.teams if t.interactive_share > 0]
        split = self.np_rng.multinomial(
            count, [t.interactive_share for t in teams] / np.sum([t.interactive_share for t in teams])
        )
        for team, n in zip(teams, split, strict=True):
            if n:
                self.waiters[team.team_id].append((now, int(n)))

    def admit_waiters(self, now: float) -> None:
        """The gateway's queue, team by team: FIFO slices asked of the share policy."""
        lease = self.m.lease_mean
        leases = self.leases
        for team, queue in self.waiters.items():
            leases.waiters[team] = sum(n for _, n in queue)
        for team, queue in self.waiters.items():
            while queue:
                arrived, count = queue[0]
                if now - arrived > self.settings.queue_timeout_s:
                    queue.popleft()
                    leases.waiters[team] -= count
                    self.recorder.count("interactive_timed_out", count)
                    continue
                # The whole cohort in one ask when it fits; else a quarter at a time, so a
                # team near its share gets what room there is.
                size = count
                leases.waiters[team] -= size
                decision = leases.decide(team, round(size * lease), True, self.capacity_tokens(), now)
                if not decision.admitted and count > 1:
                    leases.waiters[team] += size
                    size = math.ceil(count / 4)
                    leases.waiters[team] -= size
                    decision = leases.decide(team, round(size * lease), True, self.capacity_tokens(), now)
                if decision is Decision.FLEET_FULL:
                    leases.waiters[team] += size
                    break
                queue[0] = (arrived, count - size)
                if count == size:
                    queue.popleft()
                if decision.admitted:
                    flow = self.interactive[(team, decision is Decision.BORROW)]
                    flow.requests += size
                    flow.tokens += round(size * lease)
                    self.first_tokens(arrived, now - arrived, size)
                else:
                    self.recorder.count("interactive_refused", size)

    def first_tokens(self, arrived: float, wait: float, count: int) -> None:
        """TTFT of `count` requests admitted after `wait` at the gateway: the wait plus the
        probe's engine-side TTFT (folded in per hour when the probe changes, if no wait)."""
        if wait <= 0:
            self.pending_ttft[min(int(arrived // 3600), self.recorder.num_hours - 1)] += count
            return
        samples = self.probe.ttft_samples if self.probe is not None else []
        if not samples:
            self.recorder.first_token(arrived, wait, count, chat=True)
            return
        draws = min(count, 4)
        for _ in range(draws):
            ttft, chat = self.rng.choice(samples)
            self.recorder.first_token(arrived, wait + ttft, count / draws, chat=chat)

    def release_bulk(self, now: float) -> None:
        interactive, _ = self.in_flight()
        load = PoolLoad(
            pool_id=self.settings.pool_id,
            capacity_tokens=self.capacity_tokens(),
            leased_tokens=self.leases.leased_tokens,
            bulk_inflight_tokens=self.feed.inflight_tokens,
            bulk_inflight_requests=self.feed.inflight_requests,
            interactive_waiting=self.num_waiters(),
            interactive_running=round(interactive),
        )
        releases = self.feed.release(load, now, lambda batch, n: round(n * batch.mean_request_tokens))
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
        rec = self.recorder
        if self.probe is not None:
            chat_share = self.probe_ttft_chat.total / self.probe_ttft.total if self.probe_ttft.total else 0.0
            for hour, served in self.pending_ttft.items():
                if served and self.probe_ttft.total:
                    rec.ttft[hour].merge(self.probe_ttft, served / self.probe_ttft.total)
                if served and self.probe_ttft_chat.total:
                    rec.ttft_chat[hour].merge(self.probe_ttft_chat, served * chat_share / self.probe_ttft_chat.total)
            for hour, tokens in self.pending_tokens.items():
                if tokens and self.probe.itl.total:
                    rec.itl[hour].merge(self.probe.itl, tokens / self.probe.itl.total)
        self.pending_ttft.clear()
        self.pending_tokens.clear()
        self.probe = probe
        self.probe_ttft, self.probe_ttft_chat = Histogram(), Histogram()
        for ttft, chat in probe.ttft_samples:
            self.probe_ttft.add(ttft)
            if chat:
                self.probe_ttft_chat.add(ttft)
