"""The fast mode's fleet: requests as flows, servers as counts, the policies still the real ones.

Every `dt` (4 s), in four 1-s slices (`FluidFleet.tick`), the fluid fleet:

    arrivals    Poisson(rate × slice) people's requests, split across teams
    admission   SharePolicy.decide per team, on slices of the waiting requests (leases held
                here as in the exact mode); no room: they wait at the gateway, 503 after 5 s
    service     in-flight requests end at rate 1 / duration, the duration from the probe or
                the cost model (Little's law: in flight = rate × duration), half of each
                slice's endings before its arrivals and half after
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
from quota.shares import Decision, SharePolicy
from simulator.bulk_feed import BulkFeed, SimBatch
from simulator.fluid_servers import FluidServers
from simulator.histogram import Histogram
from simulator.length_moments import Moments, moments
from simulator.probe import ProbeResult
from simulator.recorder import BatchOutcome, Recorder, TtftSample
from simulator.scenario import BatchPlan, Scenario
from simulator.settings import SimSettings
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
        self.recorder = Recorder(scenario.hours)
        self.m: Moments = moments(scenario, settings.engine.block_size)
        self.bulk_lease_mean = self.m.lease_mean * settings.bulk_lease_fraction  # a bulk request's lease
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
        # The teams people's arrivals split across, and in what proportions (once: every slice
        # draws a split).
        self.people_teams = [t for t in scenario.teams if t.interactive_share > 0]
        shares = [t.interactive_share for t in self.people_teams]
        self.people_split = shares / np.sum(shares)
        self.step_s = settings.cost.step_s(0, 1, 0)
        self.probe: ProbeResult | None = None
        self.probe_ttft = Histogram()  # the latest probe's, every prompt
        self.probe_ttft_chat = Histogram()  # ... chat-sized prompts
        self.probe_ttft_beyond_read = Histogram()  # ... every prompt, less its own read
        self.pending_ttft: dict[int, float] = defaultdict(float)  # hour -> requests served at the probe's TTFT
        self.pending_tokens: dict[int, float] = defaultdict(float)  # hour -> tokens at the probe's gaps

    # -- totals -------------------------------------------------------------------------------

    def in_flight(self) -> tuple[float, float]:
        return sum(f.requests for f in self.interactive.values()), sum(f.requests for f in self.bulk.values())

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
    def leased_tokens(flows: dict[tuple[str, bool], Flow]) -> float:
        """Lease tokens the flows hold."""
        return sum(f.tokens for f in flows.values())

    def kv_used_tokens(self) -> float:
        """KV held: people's leases and bulk's (which lease `bulk_lease_fraction` of what they
        may hold) at `held_per_leased`; never more than the ready servers have (beyond it, the
        engine preempts bulk: the probes' bulk durations carry that)."""
        bulk = self.leased_tokens(self.bulk) / self.settings.bulk_lease_fraction
        leased = self.leased_tokens(self.interactive) + bulk
        return min(float(self.capacity_tokens()), leased * self.held_per_leased())

    def interactive_kv_tokens(self) -> float:
        """KV people's requests hold (see `held_per_leased`)."""
        return self.leased_tokens(self.interactive) * self.held_per_leased()

    def bulk_teams(self) -> tuple[str, ...]:
        """The teams with bulk in flight, in name order."""
        return tuple(sorted({self.batches[batch].outcome.team_id for batch, _ in self.bulk}))

    def num_waiters(self) -> int:
        return sum(n for q in self.waiters.values() for _, n in q)

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
        interactive_s = probe.interactive_duration_s if probe and probe.interactive_duration_s else duration
        bulk_s = probe.bulk_duration_s if probe and probe.bulk_duration_s else duration
        part = dt / SLICES
        for i in range(SLICES):
            at = now + i * part
            if ready:
                self.serve_people(at, part / 2, step, interactive_s)
                self.serve_bulk(at, part / 2, bulk_s)
            before = self.kv_used_tokens()
            self.arrive(at, part)
            self.admit_waiters(at)
            if self.variant.backfill and ready:
                self.release_bulk(at)
            # The stock steps up by the slice's admissions at its middle: over the slice it
            # averages the levels either side of the step.
            self.recorder.kv_token_s += (before + self.kv_used_tokens()) / 2 * part
            if ready:
                self.serve_people(at + part / 2, part / 2, step, interactive_s)
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

    def serve_people(self, now: float, dt: float, step: float, duration_s: float) -> None:
        """People's requests in flight end at rate 1 / duration over `dt`; their tokens count
        toward the hour's inter-token gaps."""
        share = 1.0 - math.exp(-dt / duration_s)
        ebb = self.m.lease_mean / self.m.lease_in_flight  # leases ebb slower than requests
        per_request = self.m.prompt_mean + self.m.reply_mean
        tokens = 0.0
        for (team, borrowed), flow in self.interactive.items():
            ended, freed = flow.requests * share, flow.tokens * share * ebb
            tokens += flow.requests * dt / step
            flow.requests -= ended
            flow.tokens -= freed
            self.leases.release(team, round(freed), borrowed=borrowed, interactive=True)
            self.recorder.team_tokens[team] += ended * per_request
            self.recorder.count("interactive_done", ended)
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

    def arrive(self, now: float, dt: float) -> None:
        count = int(self.np_rng.poisson(self.scenario.rate_at(now) * dt))
        self.arrivals.append((now, count))
        self.recorder.count("interactive_arrived", count)
        if count == 0:
            return
        split = self.np_rng.multinomial(count, self.people_split)
        for team, n in zip(self.people_teams, split, strict=True):
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
            self.recorder.first_token(arrived, TtftSample(wait, True, wait), count)
            return
        draws = min(count, 4)
        for _ in range(draws):
            self.recorder.first_token(arrived, self.rng.choice(samples).later(wait), count / draws)

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
        rec = self.recorder
        if self.probe is not None:
            chat_share = self.probe_ttft_chat.total / self.probe_ttft.total if self.probe_ttft.total else 0.0
            for hour, served in self.pending_ttft.items():
                if served and self.probe_ttft.total:
                    rec.ttft[hour].merge(self.probe_ttft, served / self.probe_ttft.total)
                    rec.ttft_beyond_read[hour].merge(self.probe_ttft_beyond_read, served / self.probe_ttft.total)
                if served and self.probe_ttft_chat.total:
                    rec.ttft_chat[hour].merge(self.probe_ttft_chat, served * chat_share / self.probe_ttft_chat.total)
            for hour, tokens in self.pending_tokens.items():
                if tokens and self.probe.itl.total:
                    rec.itl[hour].merge(self.probe.itl, tokens / self.probe.itl.total)
        self.pending_ttft.clear()
        self.pending_tokens.clear()
        self.probe = probe
        self.probe_ttft, self.probe_ttft_chat, self.probe_ttft_beyond_read = Histogram(), Histogram(), Histogram()
        for sample in probe.ttft_samples:
            self.probe_ttft.add(sample.ttft_s)
            self.probe_ttft_beyond_read.add(sample.beyond_read_s)
            if sample.chat:
                self.probe_ttft_chat.add(sample.ttft_s)
