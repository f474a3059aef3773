"""One step of bench_concurrency: open streams from client processes, hold them, measure,
close them.

    waves of Loads ──▶ each wave's client processes open their streams (the next wave starts
                       once every one of this wave's is open or failed)
    hold (hold_s)  ──▶ the bystander's probes (a process of their own); the workers' RSS, open
                       files and Redis connections sampled; their CPU time and loop lag over
                       the hold
    close          ──▶ every client drops its streams and reports its errors

While streams open, the Redis connections and open files are sampled too (a burst of new
requests is when a pool would grow).
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench.concurrency_rig import Rig
from bench.door_streams import DoorSpec
from bench.loop_lag import lags_by_pid
from bench.process_stats import ProcessSample, redis_connections_by_pid, sample, samples
from bench.sse_streams import LoadReport, LoadSpec, ProbeReport, Target, probe_ttfts

CLOSE_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Load:
    """One client process: its team, and what it runs (`sse_streams.run_load` or
    `door_streams.run_door_load`) on which spec."""

    team: str
    run: Callable[[Any, Any, int, Any], None]
    spec: LoadSpec | DoorSpec


@dataclass(frozen=True, slots=True)
class Probe:
    """The bystander's short requests during the hold."""

    target: Target
    source_ip: str
    count: int


@dataclass(slots=True)
class StepMeasure:
    """What one step saw."""

    opened: dict[str, int]  # team → streams open at the hold
    errors: dict[str, Counter[str]]  # team → errors by kind, opening and holding
    open_s: float  # from the first client's start to the last stream open
    probe: ProbeReport
    before: dict[int, ProcessSample]  # worker pid → before the step (the step's workers)
    lost: set[int] = field(default_factory=set)  # the step's workers that exited during it
    rss_kb_during: dict[int, int] = field(default_factory=dict)  # the most seen during the hold
    fds_max: dict[int, int] = field(default_factory=dict)
    redis_max: dict[int, int] = field(default_factory=dict)  # pid → most Redis connections seen
    redis_clients_max: int = 0  # every client Redis listed, at most
    cpu_s: dict[int, float] = field(default_factory=dict)  # over the hold
    hold_s: float = 0.0
    lags: dict[int, list[float]] = field(default_factory=dict)


class _Meter:
    """Samples the workers' open files and RSS and every process's Redis connections."""

    def __init__(self, rig: Rig, measure: StepMeasure) -> None:
        self.rig = rig
        self.measure = measure

    def sample(self, *, holding: bool) -> None:
        m = self.measure
        for pid in m.before:
            now = sample(pid)
            if now is None:
                m.lost.add(pid)
                continue
            m.fds_max[pid] = max(m.fds_max.get(pid, 0), now.open_fds)
            if holding:
                m.rss_kb_during[pid] = max(m.rss_kb_during.get(pid, 0), now.rss_kb)
        by_pid = redis_connections_by_pid(self.rig.admin, self.rig.redis_port)
        m.redis_clients_max = max(m.redis_clients_max, sum(by_pid.values()))
        for pid, count in by_pid.items():
            m.redis_max[pid] = max(m.redis_max.get(pid, 0), count)


def _warm(_: int) -> int:
    return 0


def run_step(rig: Rig, waves: list[list[Load]], hold_s: float, probe: Probe, open_timeout_s: float) -> StepMeasure:
    """Open `waves` one after another, hold `hold_s` with `probe`'s requests, close; measure."""
    ctx = multiprocessing.get_context("spawn")
    reports: Any = ctx.Queue()
    close = ctx.Event()
    before = samples(rig.worker_pids())
    measure = StepMeasure({}, {}, 0.0, ProbeReport([], {}), before)
    meter = _Meter(rig, measure)
    loads: list[Load] = []
    processes: list[Any] = []
    with ProcessPoolExecutor(1, mp_context=ctx) as prober:
        prober.submit(_warm, 0).result(timeout=60)  # spawned before the step: not during the hold
        try:
            started = time.monotonic()
            for wave in waves:
                first = len(loads)
                for load in wave:
                    process = ctx.Process(target=load.run, args=(load.spec, reports, len(loads), close), daemon=True)
                    process.start()
                    loads.append(load)
                    processes.append(process)
                _collect(reports, processes, first, len(loads), open_timeout_s, lambda: meter.sample(holding=False))
            measure.open_s = time.monotonic() - started
            cpu_before = {pid: now.cpu_s for pid, now in samples(list(before)).items()}
            held_at, hold_start = time.time(), time.monotonic()
            spacing = 0.8 * hold_s / max(1, probe.count)
            future = prober.submit(probe_ttfts, probe.target, probe.source_ip, probe.count, spacing)
            while (left := hold_s - (time.monotonic() - hold_start)) > 0:
                time.sleep(min(left, max(1.0, hold_s / 5)))
                meter.sample(holding=True)
            measure.hold_s = time.monotonic() - hold_start
            cpu_after = samples(list(cpu_before))
            measure.cpu_s = {pid: now.cpu_s - cpu_before[pid] for pid, now in cpu_after.items()}
            measure.lost |= set(before) - set(cpu_after)
            measure.lags = lags_by_pid(rig.lag_dir, held_at, time.time())
            measure.probe = future.result(timeout=120)
        finally:
            close.set()
        closed = _collect(reports, processes, 0, len(loads), CLOSE_TIMEOUT_S, lambda: None, kind="closed")
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    for index, report in closed.items():
        team = loads[index].team
        measure.opened[team] = measure.opened.get(team, 0) + report.opened
        measure.errors.setdefault(team, Counter()).update(report.errors)
    return measure


def _collect(
    reports: Any,
    processes: list[Any],
    first: int,
    end: int,
    timeout_s: float,
    meanwhile: Callable[[], None],
    kind: str = "opened",
) -> dict[int, LoadReport]:
    """The `kind` reports of clients `first`..`end`-1; `meanwhile` runs every 2 s of waiting."""
    got: dict[int, LoadReport] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < end - first:
        meanwhile()
        try:
            what, index, report = reports.get(timeout=2.0)
        except queue.Empty:
            dead = [i for i in range(first, end) if i not in got and not processes[i].is_alive()]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"client processes {dead or 'all'} never reported {kind!r}") from None
            continue
        if what == kind:
            got[index] = report
    return got
