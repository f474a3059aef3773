"""One gateway's turn in `bench peers`: idle, then each step of open streams, then the short
requests; the same client processes and steps for every gateway.

    idle     the gateway's (and the upstream's and Redis's) CPU a second at rest: subtracted
             from every window after, so background work is not charged to events
    step N   client processes open N streams (`peer_clients.hold_streams`, niced), hold them
             `hold_s` while a probe process times short streams' first event; the gateway's
             CPU and the events the clients read, both over the hold; its RSS sampled; then
             the streams dropped and the gateway left to close them (and, behind a peer, the
             upstream to see its replies cancelled)
    short    10-token whole replies at a fixed rate, their latencies and the CPU over the phase
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from bench.peer_clients import SLOTS, CompletionTarget, HoldSpec, ShortSpec, hold_streams, send_short
from bench.peer_gateways import Gateway
from bench.peer_rows import EVENTS_PER_S, Cpu, GatewaySeen, ShortSeen, StepSeen
from bench.process_stats import cpu_seconds, sample, served_connections
from bench.sse_streams import ProbeReport, probe_ttfts
from server_host.process import wait_until

IDLE_WINDOW_S = 3.0
SETTLE_TIMEOUT_S = 90.0
QUIET_CORES = 0.1
QUIET_WINDOW_S = 1.0
PROBE_SOURCE = "127.0.0.2"
# How long after the hold the probes may still take (one that waits 30 s for its first event is late)
PROBE_GRACE_S = 45.0


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps (open streams), how long each holds, the probes per step, the short
    requests' rate and length, and how the streams spread over client processes."""

    steps: tuple[int, ...]
    hold_s: float
    probes: int
    short_rate: float
    short_s: float
    short_tokens: int = 10
    streams_per_process: int = 1250
    open_concurrency: int = 64

    def open_deadline_s(self, streams: int) -> float:
        return 30.0 + streams / 50

    def reply_tokens(self, streams: int) -> int:
        """A held stream's tokens: at 25 a second, open past the step's end but not far past
        it (a gateway that does not cancel a dropped stream's reply leaves it running)."""
        return round(EVENTS_PER_S * (self.open_deadline_s(streams) + self.hold_s + PROBE_GRACE_S + 10))


class Addresses:
    """A loopback source address per client process (127.0.1.x on): each its own port range."""

    def __init__(self) -> None:
        self._next = 0

    def take(self) -> str:
        self._next += 1
        return f"127.0.{1 + self._next // 250}.{1 + self._next % 250}"


def _cpu_of(pids: list[int]) -> float:
    return sum(cpu or 0.0 for cpu in map(cpu_seconds, pids))


def cpu_now(gateway: Gateway, upstream: Gateway | None) -> Cpu:
    """CPU seconds so far: the gateway's processes, the upstream's, its Redis's."""
    return Cpu(
        _cpu_of(gateway.pids()),
        None if upstream is None else _cpu_of(upstream.pids()),
        None if gateway.redis_pid is None else cpu_seconds(gateway.redis_pid),
    )


def _delta(after: Cpu, before: Cpu) -> Cpu:
    def minus(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    return Cpu(
        after.gateway_s - before.gateway_s,
        minus(after.upstream_s, before.upstream_s),
        minus(after.redis_s, before.redis_s),
    )


def _rss_kb(gateway: Gateway) -> int:
    return sum(now.rss_kb for now in map(sample, gateway.pids()) if now is not None)


def _in_flight(upstream: Gateway | None) -> int:
    """The upstream's replies not yet ended (0 when there is none, or it does not say)."""
    if upstream is None:
        return 0
    try:
        return int(httpx.get(f"http://127.0.0.1:{upstream.port}/bench/in-flight", timeout=5).json()["in_flight"])
    except (httpx.HTTPError, ValueError, KeyError):
        return 0


def settle(gateway: Gateway, upstream: Gateway | None) -> int:
    """Wait until the gateway serves no connection and the upstream sends no reply; the
    replies still being sent at the timeout (a gateway that does not cancel them)."""
    wait_until(lambda: served_connections((gateway.port,)) == 0, SETTLE_TIMEOUT_S, 0.25)
    behind = upstream is not None and upstream.name != gateway.name
    wait_until(lambda: not behind or _in_flight(upstream) == 0, SETTLE_TIMEOUT_S if behind else 0, 0.5)
    wait_until(lambda: _quiet(gateway), SETTLE_TIMEOUT_S, 0.0)  # its cancelled requests' own work done
    return _in_flight(upstream) if behind else 0


def _quiet(gateway: Gateway) -> bool:
    """Whether the gateway used under `QUIET_CORES` over the next `QUIET_WINDOW_S`."""
    before = _cpu_of(gateway.pids())
    time.sleep(QUIET_WINDOW_S)
    return _cpu_of(gateway.pids()) - before < QUIET_CORES * QUIET_WINDOW_S


def idle_cpu(gateway: Gateway, upstream: Gateway | None) -> Cpu:
    """CPU seconds per second at rest over `IDLE_WINDOW_S`."""
    before = cpu_now(gateway, upstream)
    time.sleep(IDLE_WINDOW_S)
    used = _delta(cpu_now(gateway, upstream), before)
    return Cpu(
        used.gateway_s / IDLE_WINDOW_S,
        None if used.upstream_s is None else used.upstream_s / IDLE_WINDOW_S,
        None if used.redis_s is None else used.redis_s / IDLE_WINDOW_S,
    )


def _warm(_: int) -> int:
    return 0


def _probe(target: CompletionTarget, count: int, spacing_s: float, reports: Any) -> None:
    reports.put(probe_ttfts(target, PROBE_SOURCE, count, spacing_s))


def run_step(
    gateway: Gateway,
    upstream: Gateway | None,
    plan: Plan,
    streams: int,
    addresses: Addresses,
) -> StepSeen:
    """Open `streams` streams, hold them, measure, drop them, let the gateway settle."""
    target = CompletionTarget("127.0.0.1", gateway.port, gateway.api_key, gateway.model)
    ctx = multiprocessing.get_context("spawn")
    processes = max(1, math.ceil(streams / plan.streams_per_process))
    shares = [streams // processes + (i < streams % processes) for i in range(processes)]
    counts: Any = ctx.Array("q", SLOTS * processes, lock=False)
    close, errors = ctx.Event(), ctx.Queue()
    rss_before = _rss_kb(gateway)
    deadline = plan.open_deadline_s(streams)
    clients = []
    for index, share in enumerate(shares):
        spec = HoldSpec(target, addresses.take(), share, plan.reply_tokens(streams), plan.open_concurrency, deadline)
        process = ctx.Process(target=hold_streams, args=(spec, counts, index, close, errors), daemon=True)
        process.start()
        clients.append(process)

    def tally(slot: int) -> int:
        return sum(counts[SLOTS * i + slot] for i in range(processes))

    try:
        settled = wait_until(lambda: tally(2) + tally(1) >= streams, deadline + 30, 0.1)
        if not settled:
            print(f"peers: {gateway.name} {streams}: not every stream opened or failed in time", file=sys.stderr)
        cpu_before, events_before, began = cpu_now(gateway, upstream), tally(0), time.monotonic()
        spacing = 0.8 * plan.hold_s / max(1, plan.probes)
        reports: Any = ctx.Queue()
        probing = ctx.Process(target=_probe, args=(target, plan.probes, spacing, reports), daemon=True)
        probing.start()
        rss_max = rss_before
        while (left := plan.hold_s - (time.monotonic() - began)) > 0:
            time.sleep(min(left, 1.0))
            rss_max = max(rss_max, _rss_kb(gateway))
        cpu_after, events_after, hold_s = cpu_now(gateway, upstream), tally(0), time.monotonic() - began
        opened = tally(2)
        try:
            probe = reports.get(timeout=PROBE_GRACE_S)
        except queue.Empty:
            probe = ProbeReport([], {"probe timeout": plan.probes})
        probing.join(5)
        if probing.is_alive():
            probing.kill()
    finally:
        close.set()
    kinds: Counter[str] = Counter()
    for _ in clients:
        try:
            _, found = errors.get(timeout=60)
        except queue.Empty:
            kinds["client never reported"] += 1
            continue
        kinds.update(found)
    for process in clients:
        process.join(30)
        if process.is_alive():
            process.kill()
    kinds.update({f"probe {kind}": n for kind, n in probe.errors.items()})
    orphans = settle(gateway, upstream)
    return StepSeen(
        streams,
        opened,
        dict(kinds),
        events_after - events_before,
        hold_s,
        _delta(cpu_after, cpu_before),
        rss_before,
        rss_max,
        probe.ttfts,
        orphans,
    )


def run_short(gateway: Gateway, upstream: Gateway | None, plan: Plan, pool: ProcessPoolExecutor) -> ShortSeen:
    """The short requests from a client process; CPU from the first sent to the last answered."""
    target = CompletionTarget("127.0.0.1", gateway.port, gateway.api_key, gateway.model)
    before, began = cpu_now(gateway, upstream), time.monotonic()
    report = pool.submit(send_short, ShortSpec(target, plan.short_rate, plan.short_s, plan.short_tokens)).result()
    seconds = time.monotonic() - began
    used = _delta(cpu_now(gateway, upstream), before)
    settle(gateway, upstream)
    return ShortSeen(report.sent, report.latencies, report.errors, seconds, used)


def measure(gateway: Gateway, upstream: Gateway | None, plan: Plan, addresses: Addresses) -> GatewaySeen:
    """A gateway's whole turn. Steps after one that failed streams are not run (a bigger one
    fails too); the short requests always are."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        pool.submit(_warm, 0).result(timeout=60)  # spawned before any window: not in one
        target = CompletionTarget("127.0.0.1", gateway.port, gateway.api_key, gateway.model)
        pool.submit(probe_ttfts, target, PROBE_SOURCE, 5, 0.05).result(timeout=120)  # warm the gateway
        settle(gateway, upstream)
        seen = GatewaySeen(gateway.name, gateway.version, idle_cpu(gateway, upstream))
        for streams in plan.steps:
            print(f"peers: {gateway.name}: {streams} streams ...", file=sys.stderr, flush=True)
            step = run_step(gateway, upstream, plan, streams, addresses)
            seen.steps.append(step)
            if step.opened < streams:
                break
        print(f"peers: {gateway.name}: short requests ...", file=sys.stderr, flush=True)
        return GatewaySeen(seen.name, seen.version, seen.idle, seen.steps, run_short(gateway, upstream, plan, pool))
