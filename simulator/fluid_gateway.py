"""The gateway of the fast mode: people's arrivals as cohorts by class and team, admitted as the
exact mode admits requests one at a time (`exact_fleet.py`), a cohort at a time.

    arrivals    Poisson(rate × slice), split by the scenario's class mix, then by team
    priority    the share policy, before any lower class        ─┐ no room: wait, 503 after
    interactive the share policy, once no priority cohort waits  ─┘ the queue timeout
    flex        flex's rule (`TeamLeases.flex_room`): only once neither waits, as much of the
                cohort as the room the higher tiers leave holds; the rest waits, 429 after
                `flex_wait_s`

A cohort is asked of the share policy whole when it fits; else a quarter at a time, so a team
near its share gets what room there is (a slice is a tenth of a team's stock). With one class
(no tiers) the arrivals draw exactly what they drew before the tiers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from contracts.service_tier import RequestClass
from quota.shares import Decision
from simulator.recorder import Recorder
from simulator.scenario import Scenario
from simulator.settings import SimSettings
from simulator.sim_request import FLEX, PRIORITY, SHAPED_CLASSES
from simulator.team_leases import TeamLeases

Cohort = tuple[float, int]  # (arrived at, requests)
# Called for each admitted cohort: (class, team, borrowed, arrived at, admitted at, requests).
Admitted = Callable[[RequestClass, str, bool, float, float, int], None]


class FluidGateway:
    """People's cohorts waiting for room, and the arrivals the autoscaler's rates come from."""

    def __init__(
        self,
        scenario: Scenario,
        settings: SimSettings,
        leases: TeamLeases,
        recorder: Recorder,
        np_rng: np.random.Generator,
        lease_mean: float,
    ) -> None:
        self.scenario = scenario
        self.settings = settings
        self.leases = leases
        self.recorder = recorder
        self.np_rng = np_rng
        self.lease_mean = lease_mean
        teams = [t.team_id for t in scenario.teams]
        mix = dict(scenario.class_mix)
        self.classes = [c for c in SHAPED_CLASSES if c in mix]
        self.class_split = np.array([mix[c] for c in self.classes]) / sum(mix.values())
        self.waiters: dict[tuple[RequestClass, str], deque[Cohort]] = {
            (c, team): deque() for c in self.classes for team in teams
        }
        self.arrivals: deque[tuple[float, RequestClass, int]] = deque()
        # The teams people's arrivals split across, and in what proportions (once: every slice
        # draws a split).
        self.people_teams = [t for t in scenario.teams if t.interactive_share > 0]
        shares = [t.interactive_share for t in self.people_teams]
        self.people_split = shares / np.sum(shares)

    def num_waiters(self, *, demand_only: bool = False) -> int:
        """Requests waiting; `demand_only`: priority and interactive (flex waits by design)."""
        return sum(n for (c, _), q in self.waiters.items() if not (demand_only and c == FLEX) for _, n in q)

    def oldest_demand_waiter(self) -> float | None:
        """When the longest-waiting priority or interactive cohort arrived."""
        return min((q[0][0] for (c, _), q in self.waiters.items() if q and c != FLEX), default=None)

    def arrive(self, now: float, dt: float) -> None:
        count = int(self.np_rng.poisson(self.scenario.rate_at(now) * dt))
        if len(self.classes) == 1:
            by_class = [count]
        else:
            by_class = [int(n) for n in self.np_rng.multinomial(count, self.class_split)]
        for request_class, n in zip(self.classes, by_class, strict=True):
            self.arrivals.append((now, request_class, n))
            self.recorder.count(f"{request_class}_arrived", n)
            if n == 0:
                continue
            split = self.np_rng.multinomial(n, self.people_split)
            for team, m in zip(self.people_teams, split, strict=True):
                if m:
                    self.waiters[(request_class, team.team_id)].append((now, int(m)))

    def admit(self, now: float, capacity_tokens: int, admitted: Admitted) -> None:
        """The queue, highest class first (see the module docstring)."""
        waiting = self.leases.waiters
        for team in waiting:
            waiting[team] = 0
        for (request_class, team), queue in self.waiters.items():
            if request_class != FLEX:
                waiting[team] += sum(n for _, n in queue)
        for (request_class, team), queue in self.waiters.items():
            if request_class == FLEX:
                self._admit_flex(team, queue, now, capacity_tokens, admitted)
            else:
                self._admit_shared(request_class, team, queue, now, capacity_tokens, admitted)

    def _admit_shared(
        self,
        request_class: RequestClass,
        team: str,
        queue: deque[Cohort],
        now: float,
        capacity_tokens: int,
        admitted: Admitted,
    ) -> None:
        lease, leases = self.lease_mean, self.leases
        waiting = leases.waiters
        priority = request_class == PRIORITY
        while queue:
            arrived, count = queue[0]
            if now - arrived > self.settings.queue_timeout_s:
                queue.popleft()
                waiting[team] -= count
                self.recorder.count(f"{request_class}_timed_out", count)
                continue
            # The whole cohort in one ask when it fits; else a quarter at a time.
            size = count
            waiting[team] -= size
            decision = leases.decide(team, round(size * lease), True, capacity_tokens, now, priority=priority)
            if not decision.admitted and count > 1:
                waiting[team] += size
                size = math.ceil(count / 4)
                waiting[team] -= size
                decision = leases.decide(team, round(size * lease), True, capacity_tokens, now, priority=priority)
            if decision is Decision.FLEET_FULL:
                waiting[team] += size
                break
            queue[0] = (arrived, count - size)
            if count == size:
                queue.popleft()
            if decision.admitted:
                admitted(request_class, team, decision is Decision.BORROW, arrived, now, size)
            else:
                self.recorder.count(f"{request_class}_refused", size)

    def _admit_flex(
        self, team: str, queue: deque[Cohort], now: float, capacity_tokens: int, admitted: Admitted
    ) -> None:
        lease, leases = self.lease_mean, self.leases
        higher_waiting = self.num_waiters(demand_only=True) > 0
        while queue:
            arrived, count = queue[0]
            if now - arrived > self.settings.flex_wait_s:
                queue.popleft()
                self.recorder.count("flex_refused", count)
                continue
            if higher_waiting:
                return
            size = min(count, max(0, int(leases.flex_room(capacity_tokens) // lease)))
            if size == 0:
                return
            leases.take_flex(round(size * lease))
            queue[0] = (arrived, count - size)
            if count == size:
                queue.popleft()
            if now > arrived:
                self.recorder.count("flex_waited", size)
                self.recorder.flex_wait.add(now - arrived, size)
            admitted(FLEX, team, False, arrived, now, size)
