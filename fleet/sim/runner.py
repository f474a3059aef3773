"""Runs a scenario under each policy, side by side, in one process: the same seed, the same
traffic, so the differences are the policies' (docs/simulator.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fleet.sim.exact_run import run_exact
from fleet.sim.fluid_run import ProbeSettings, run_fast
from fleet.sim.length_moments import scenario_capacity
from fleet.sim.recorder import Recorder
from fleet.sim.scenario import Scenario
from fleet.sim.settings import SimSettings
from fleet.sim.summary import Summary, summarize
from fleet.sim.variants import make_policy


@dataclass(frozen=True, slots=True)
class PolicyRun:
    name: str
    recorder: Recorder
    summary: Summary


def run_policy(
    name: str, scenario: Scenario, settings: SimSettings, *, seed: int, exact: bool, probe: ProbeSettings | None = None
) -> PolicyRun:
    """One policy over the scenario: exact (every server step-level) or fast (fluid + probes)."""
    capacity = scenario_capacity(scenario, settings)
    policy, variant = make_policy(name, scenario, settings, capacity)
    started = time.perf_counter()
    if exact:
        recorder = run_exact(scenario, settings, policy, variant, seed)
    else:
        recorder = run_fast(scenario, settings, policy, variant, seed, probe)
    wall_s = time.perf_counter() - started
    return PolicyRun(name, recorder, summarize(name, recorder, scenario, wall_s))
