"""Runs a scenario under each policy, side by side: the same seed, the same traffic, so the
differences are the policies' (docs/simulator.md).

Each policy's run is independent of the others (its own policy object, fleet and generators,
seeded from the same seed), so `run_policies` may run them in separate processes: a day of
the brief's fleet takes one to two minutes a policy, and two cores halve the four. The runs
are the same either way (tests/simulator/test_runner.py).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from simulator.exact_run import run_exact
from simulator.fluid_run import ProbeSettings, run_fast
from simulator.length_moments import scenario_capacity
from simulator.recorder import Recorder
from simulator.scenario import Scenario
from simulator.settings import SimSettings
from simulator.summary import Summary, summarize
from simulator.variants import make_policy


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


def run_policies(
    names: Sequence[str],
    scenario: Scenario,
    settings: SimSettings,
    *,
    seed: int,
    exact: bool,
    probe: ProbeSettings | None = None,
    jobs: int = 1,
    on_done: Callable[[PolicyRun], None] | None = None,
) -> list[PolicyRun]:
    """Every policy in `names`, returned in that order; with `jobs` > 1 in up to that many
    processes, each policy whole in one of them. `on_done` hears of each run as it ends."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1 or len(names) <= 1:
        runs = []
        for name in names:
            runs.append(run_policy(name, scenario, settings, seed=seed, exact=exact, probe=probe))
            if on_done is not None:
                on_done(runs[-1])
        return runs
    # Spawned, not forked: a worker starts from the modules alone, never from whatever state
    # the parent happens to hold.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(names)), mp_context=context) as pool:
        futures = {
            pool.submit(run_policy, name, scenario, settings, seed=seed, exact=exact, probe=probe): i
            for i, name in enumerate(names)
        }
        done: dict[int, PolicyRun] = {}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if on_done is not None:
                on_done(done[futures[future]])
    return [done[i] for i in range(len(names))]
