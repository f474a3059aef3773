"""The autoscaler policies: plain objects that take one pool's signals and answer a target.

`Autoscaler` looks ahead; `ReactiveAutoscaler` and `StaticFleet` are the baselines the simulator
runs beside it. None does I/O or reads a clock (time is `signals.now`), so the live service and
the simulator drive the very same objects. One object per pool: each remembers its pool's hold.

How `Autoscaler` counts one pool's need, every interval (the four classes' parts in it:
`autoscaler/demand_classes.py`):

    interactive  peak forecast of the demand classes' rate (priority + interactive; flex never
                 starts a server) over [now, now + startup + interval] (a server started now
                 helps only after startup), through Little's law:
                     load = rate × avg_request_s / requests      (full servers' worth)
                     interactive = load / target_kv_fraction
    bulk         the fewest servers that meet every deadline, earliest first, beside the
                 interactive load the forecast expects until then (`autoscaler/bulk_need.py`: an
                 overnight backlog must be done before the morning ramp takes the room); bulk
                 takes only what interactive leaves, so
                 max(interactive, bulk) = interactive + the bulk the spare part cannot carry
    headroom     + headroom_servers on top of those, for a server that fails
    floor        current load (TTFT, waiting, KV): at least one more than ready (`load_floor.py`)
    soak         never fewer than the servers the backlog can keep busy for a start-up time,
                 up to the current count: bulk holds idle servers, it never starts them
    need = max(max(⌈interactive⌉, ⌈bulk⌉) + headroom, floor, soak), then paced (`pacing.py`)

An infeasible deadline (one that falls before a new server could start) asks for max_copies.
"""

from __future__ import annotations

import math

from autoscaler.bulk_need import BulkNeed, LoadCurve, bulk_need, interactive_load, soak_servers
from autoscaler.load_floor import load_floor
from autoscaler.load_profile import LoadProfile
from autoscaler.pacing import TargetPacer
from autoscaler.signals import PoolSignals, ScalingDecision, ServerCapacity
from bulk.deadlines import format_duration
from config.settings import AutoscalerSpec

CURVE_STEP_S = 900.0  # the bulk look-ahead samples the forecast every 15 minutes


class Autoscaler:
    """The look-ahead policy (module docstring). `profile` may come with history (last week's
    load, loaded by the caller); every decision records the pool's current rate into it."""

    def __init__(
        self,
        spec: AutoscalerSpec,
        capacity: ServerCapacity,
        *,
        min_copies: int,
        max_copies: int,
        profile: LoadProfile | None = None,
    ) -> None:
        _check_capacity(capacity)
        self._spec = spec
        self._capacity = capacity
        self._pacer = TargetPacer(min_copies=min_copies, max_copies=max_copies, scale_in_after_s=spec.scale_in_after_s)
        self._profile = LoadProfile() if profile is None else profile
        self._pool = _PoolCheck()

    def decide(self, signals: PoolSignals) -> ScalingDecision:
        """Record the pool's rate, count its need (module docstring) and pace it into a target."""
        self._pool.check(signals.pool_id)
        spec, capacity = self._spec, self._capacity
        self._profile.record(signals.now, signals.demand_rate)
        look_ahead_s = spec.startup_s + spec.interval_s
        peak = self._profile.peak(signals.now, look_ahead_s)
        load = interactive_load(peak.rate, capacity)
        interactive = _ceil(load / spec.target_kv_fraction)
        when = "now" if peak.after_s == 0 else f"in {format_duration(peak.after_s)}"
        reasons = [f"forecast {peak.rate:.0f} req/s {when} needs {interactive}"]

        bulk = bulk_need(
            signals.bulk,
            now=signals.now,
            ready=signals.ready,
            curve=self._load_curve(signals, load),
            capacity=capacity,
            startup_s=spec.startup_s,
        )
        bulk_servers = self._bulk_servers(bulk, interactive, reasons)
        base = max(interactive, bulk_servers)
        headroom = spec.headroom_servers if base > 0 else 0
        if headroom:
            reasons.append(f"headroom: +{headroom} for a failed server")
        soak = min(
            signals.current, _ceil(soak_servers(bulk.tokens_left, load=load, capacity=capacity, window_s=look_ahead_s))
        )
        if soak > base + headroom:
            reasons.append(f"bulk soak: {_tokens(bulk.tokens_left)} tokens keep {soak} busy")
        floor = load_floor(
            signals, capacity=capacity, target_kv_fraction=spec.target_kv_fraction, ttft_target_s=spec.ttft_target_s
        )
        reasons.extend(floor.reasons)
        need = max(base + headroom, floor.servers, soak)
        paced = self._pacer.pace(now=signals.now, current=signals.current, starting=signals.starting, need=need)
        parts = {
            "rate_now": signals.demand_rate,
            "forecast_rate": peak.rate,
            "forecast_after_s": peak.after_s,
            "interactive_load": load,
            "interactive_servers": float(interactive),
            "bulk_servers": float(bulk_servers),
            "bulk_extra_servers": float(max(0, bulk_servers - interactive)),
            "bulk_tokens_left": float(bulk.tokens_left),
            "soak_servers": float(soak),
            "floor_servers": float(floor.servers),
            "headroom": float(headroom),
            "need": float(need),
        }
        return ScalingDecision(signals.pool_id, paced.target, signals.current, (*reasons, *paced.reasons), parts)

    def _load_curve(self, signals: PoolSignals, peak_load: float) -> LoadCurve:
        """The interactive load the forecast expects until the last bulk deadline, a sample per
        curve step; the look-ahead's peak covers the first start-up."""
        if not signals.bulk:
            return LoadCurve.flat(peak_load)
        horizon_s = max(batch.deadline for batch in signals.bulk) - signals.now
        count = max(1, math.ceil(horizon_s / CURVE_STEP_S))
        loads = [
            interactive_load(self._profile.forecast(signals.now, k * CURVE_STEP_S), self._capacity)
            for k in range(count)
        ]
        loads[0] = max(loads[0], peak_load)
        return LoadCurve(CURVE_STEP_S, tuple(loads))

    def _bulk_servers(self, bulk: BulkNeed, interactive: int, reasons: list[str]) -> int:
        """The servers the deadlines need (max_copies when one cannot be met), with the reasons."""
        due = f"{_tokens(bulk.tokens_due)} tokens due in {format_duration(bulk.due_in_s)}"
        if bulk.overdue_tokens:
            reasons.append(f"bulk: {_tokens(bulk.overdue_tokens)} tokens past their deadline, not counted")
        if not bulk.feasible:
            startup = format_duration(self._spec.startup_s)
            reasons.append(f"bulk: {due} cannot be met (a server takes {startup} to start)")
            return self._pacer.max_copies
        servers = _ceil(bulk.servers)
        if servers > interactive:
            reasons.append(f"bulk: {due} need {servers}")
        return servers


class ReactiveAutoscaler:
    """Baseline: the same arithmetic on the current rate only, no forecast and no bulk.

    It asks for what the last interval's rate needs, so on a ramp its servers arrive a start-up
    time after the load they were started for: the lag the look-ahead exists to remove."""

    def __init__(self, spec: AutoscalerSpec, capacity: ServerCapacity, *, min_copies: int, max_copies: int) -> None:
        _check_capacity(capacity)
        self._spec = spec
        self._capacity = capacity
        self._pacer = TargetPacer(min_copies=min_copies, max_copies=max_copies, scale_in_after_s=spec.scale_in_after_s)
        self._pool = _PoolCheck()

    def decide(self, signals: PoolSignals) -> ScalingDecision:
        self._pool.check(signals.pool_id)
        spec = self._spec
        load = interactive_load(signals.demand_rate, self._capacity)
        interactive = _ceil(load / spec.target_kv_fraction)
        reasons = [f"current {signals.demand_rate:.0f} req/s needs {interactive}"]
        headroom = spec.headroom_servers if interactive > 0 else 0
        if headroom:
            reasons.append(f"headroom: +{headroom} for a failed server")
        floor = load_floor(
            signals,
            capacity=self._capacity,
            target_kv_fraction=spec.target_kv_fraction,
            ttft_target_s=spec.ttft_target_s,
        )
        reasons.extend(floor.reasons)
        need = max(interactive + headroom, floor.servers)
        paced = self._pacer.pace(now=signals.now, current=signals.current, starting=signals.starting, need=need)
        parts = {
            "rate_now": signals.demand_rate,
            "interactive_load": load,
            "interactive_servers": float(interactive),
            "floor_servers": float(floor.servers),
            "headroom": float(headroom),
            "need": float(need),
        }
        return ScalingDecision(signals.pool_id, paced.target, signals.current, (*reasons, *paced.reasons), parts)


class StaticFleet:
    """Baseline: always `copies` (the brief's 400 GPUs, sized once for the peak)."""

    def __init__(self, copies: int) -> None:
        if copies < 0:
            raise ValueError(f"copies must be >= 0, got {copies}")
        self._copies = copies

    def decide(self, signals: PoolSignals) -> ScalingDecision:
        return ScalingDecision(
            signals.pool_id,
            self._copies,
            signals.current,
            (f"static fleet of {self._copies}",),
            {"need": float(self._copies)},
        )


class _PoolCheck:
    """A policy object holds one pool's hold timer (and profile): feeding it another pool's
    signals would mix them silently, so the first pool seen is the only one accepted."""

    def __init__(self) -> None:
        self._pool_id: str | None = None

    def check(self, pool_id: str) -> None:
        if self._pool_id is None:
            self._pool_id = pool_id
        elif pool_id != self._pool_id:
            raise ValueError(f"this autoscaler decides for pool {self._pool_id!r}, not {pool_id!r}: use one per pool")


def _check_capacity(capacity: ServerCapacity) -> None:
    if capacity.requests <= 0 or capacity.tokens_per_s <= 0 or capacity.avg_request_s <= 0:
        raise ValueError(f"server capacity must be positive, got {capacity}")


def _ceil(servers: float) -> int:
    """Whole servers, forgiving float dust (100.00000000001 servers is 100)."""
    return max(0, math.ceil(servers - 1e-9))


def _tokens(count: float) -> str:
    """3100000000 -> "3.1e9": token counts span eight orders of magnitude."""
    if count < 10_000:
        return f"{count:.0f}"
    mantissa, exponent = f"{count:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"
