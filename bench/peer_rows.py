"""What `bench peers` measured, and the arithmetic that turns it into per-unit rows: CPU per
streamed event and per short request (net of the gateway's own idle CPU), TTFT and latency
added over the bare upstream, RSS per open stream, the most streams held with no error.

Every figure is a ratio or a per-unit figure from one run, so the other work on a shared
machine moves it less than it moves absolute rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

EVENTS_PER_S = 25.0  # per stream: a token every 40 ms
KEPT_PACE = 0.9  # a step whose clients read at least this share of the paced events kept up
# The targets: switchyard's figure over the peer's, at most.
TARGETS = {
    "per_event_vs_litellm": 0.5,
    "per_request_vs_litellm": 0.5,
    "per_event_vs_smg": 3.0,
}


@dataclass(frozen=True, slots=True)
class Cpu:
    """CPU seconds over a window: the gateway's processes, the upstream's, the Redis's it uses
    (None where it has none)."""

    gateway_s: float
    upstream_s: float | None = None
    redis_s: float | None = None

    def less(self, idle: Cpu, seconds: float) -> Cpu:
        """This window's CPU less `idle`'s rate (CPU seconds a second) over `seconds`."""

        def net(used: float | None, rate: float | None) -> float | None:
            return None if used is None else max(0.0, used - (rate or 0.0) * seconds)

        return Cpu(
            max(0.0, self.gateway_s - idle.gateway_s * seconds),
            net(self.upstream_s, idle.upstream_s),
            net(self.redis_s, idle.redis_s),
        )


@dataclass(frozen=True, slots=True)
class StepSeen:
    """One step of open streams: asked, opened, failed; events the clients read during the
    hold; CPU over the hold; RSS before and at most during; the probes' times to first event;
    replies the upstream was still sending after the clients had closed theirs."""

    streams: int
    opened: int
    errors: dict[str, int]
    events: int
    hold_s: float
    cpu: Cpu
    rss_before_kb: int
    rss_max_kb: int
    ttfts: list[float]
    orphans: int = 0


@dataclass(frozen=True, slots=True)
class ShortSeen:
    """The short requests: sent, the answered ones' latencies, failures, the phase's length
    (first sent to last answered) and CPU over it."""

    sent: int
    latencies: list[float]
    errors: dict[str, int]
    seconds: float
    cpu: Cpu


@dataclass(frozen=True, slots=True)
class GatewaySeen:
    """Everything one gateway's turn measured; `idle` is CPU seconds per second at rest."""

    name: str
    version: str
    idle: Cpu
    steps: list[StepSeen] = field(default_factory=list)
    short: ShortSeen | None = None


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q` quantile (0 < q ≤ 1) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 2)


def _per(used: float | None, count: int, scale: float) -> float | None:
    return None if used is None or count <= 0 else round(scale * used / count, 3)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 2)


def step_row(step: StepSeen, idle: Cpu) -> dict[str, Any]:
    """One step's figures (CPU net of idle)."""
    cpu = step.cpu.less(idle, step.hold_s)
    events_per_s = step.events / step.hold_s if step.hold_s > 0 else 0.0
    return {
        "streams": step.streams,
        "opened": step.opened,
        "errors": sum(step.errors.values()),
        "events_per_s": round(events_per_s),
        "pace_kept": round(events_per_s / (EVENTS_PER_S * step.streams), 3) if step.streams else None,
        "cpu_us_per_event": _per(cpu.gateway_s, step.events, 1e6),
        "cores": round(cpu.gateway_s / step.hold_s, 3) if step.hold_s > 0 else None,
        "upstream_us_per_event": _per(cpu.upstream_s, step.events, 1e6),
        "redis_us_per_event": _per(cpu.redis_s, step.events, 1e6),
        "kb_per_stream": _per(max(0, step.rss_max_kb - step.rss_before_kb), step.opened, 1.0),
        "ttft_p50_ms": _ms(percentile(step.ttfts, 0.5)),
        "ttft_p99_ms": _ms(percentile(step.ttfts, 0.99)),
        "orphans": step.orphans,
        "error_kinds": dict(step.errors),
    }


def _clean(row: dict[str, Any]) -> bool:
    return bool(row["errors"] == 0 and row["opened"] == row["streams"])


def headline_step(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step whose CPU per event a gateway is quoted at: the largest that held every stream
    with no error and kept the pace (a gateway behind the pace batches events, and its CPU per
    event falls for it); else the first."""
    kept = [row for row in rows if _clean(row) and (row["pace_kept"] or 0) >= KEPT_PACE]
    return kept[-1] if kept else (rows[0] if rows else None)


def gateway_row(seen: GatewaySeen, bare: GatewaySeen | None) -> dict[str, Any]:
    """A gateway's row: its per-unit figures, TTFT and latency added over `bare` (the upstream
    alone, same clients) at the first step and in the short requests, and its steps."""
    steps = [step_row(step, seen.idle) for step in seen.steps]
    headline = headline_step(steps)
    clean = [row for row in steps if _clean(row)]
    row: dict[str, Any] = {
        "gateway": seen.name,
        "cpu_us_per_event": headline["cpu_us_per_event"] if headline else None,
        "at_streams": headline["streams"] if headline else None,
        "cpu_ms_per_request": None,
        "ttft_added_p50_ms": None,
        "ttft_added_p99_ms": None,
        "kb_per_stream": (clean[-1] if clean else steps[-1])["kb_per_stream"] if steps else None,
        "streams_0_errors": clean[-1]["streams"] if clean else 0,
        "latency_added_p50_ms": None,
        "latency_added_p99_ms": None,
        "short_errors": None,
        "idle_cores": round(seen.idle.gateway_s, 3),
        "version": seen.version,
        "error": None,
    }
    if steps and bare is not None and bare.steps:
        first, bare_first = seen.steps[0].ttfts, bare.steps[0].ttfts
        row["ttft_added_p50_ms"] = _minus(_ms(percentile(first, 0.5)), _ms(percentile(bare_first, 0.5)))
        row["ttft_added_p99_ms"] = _minus(_ms(percentile(first, 0.99)), _ms(percentile(bare_first, 0.99)))
    if seen.short is not None:
        short = seen.short
        cpu = short.cpu.less(seen.idle, short.seconds)
        row["cpu_ms_per_request"] = _per(cpu.gateway_s, len(short.latencies), 1e3)
        row["short_errors"] = sum(short.errors.values())
        if bare is not None and bare.short is not None:
            for q, name in ((0.5, "latency_added_p50_ms"), (0.99, "latency_added_p99_ms")):
                row[name] = _minus(_ms(percentile(short.latencies, q)), _ms(percentile(bare.short.latencies, q)))
    row["steps"] = steps
    return row


def error_row(name: str, error: str) -> dict[str, Any]:
    """The row of a gateway that could not be measured."""
    return {
        "gateway": name,
        "cpu_us_per_event": None,
        "cpu_ms_per_request": None,
        "ttft_added_p99_ms": None,
        "kb_per_stream": None,
        "streams_0_errors": None,
        "error": error,
    }


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """switchyard's figures over the peers' the issue's targets name, each with its target and
    whether it is met (None where either side is missing)."""
    by_name = {row["gateway"]: row for row in rows}

    def ratio(field_name: str, peer: str) -> float | None:
        ours, theirs = by_name.get("switchyard", {}).get(field_name), by_name.get(peer, {}).get(field_name)
        return None if ours is None or not theirs else round(ours / theirs, 3)

    found = {
        "per_event_vs_litellm": ratio("cpu_us_per_event", "litellm"),
        "per_request_vs_litellm": ratio("cpu_ms_per_request", "litellm"),
        "per_event_vs_smg": ratio("cpu_us_per_event", "smg"),
        "per_event_vs_vllm_router": ratio("cpu_us_per_event", "vllm-router"),
        "per_request_vs_smg": ratio("cpu_ms_per_request", "smg"),
    }
    return {
        name: {
            "ratio": value,
            "target": TARGETS.get(name),
            "met": None if value is None or name not in TARGETS else value <= TARGETS[name],
        }
        for name, value in found.items()
    }
