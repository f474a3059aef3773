"""bench_concurrency's rows: one per step, what it measured against the targets.

step  streams  open_s  errors  expected_429     errors by kind apart from what the step's
                                                story expects (the flooder's 429s)
ttft_p50_ms  ttft_p99_ms  ttft_p50_x  ttft_p99_x  bystander_errors
                                                the bystander's requests; x: over idle
lag_p99_ms_wN                                   worker N's event-loop lag over the hold
rss_kb_per_stream                               the workers' RSS during, less before, per stream
redis_conns_wN  redis_conns_max_process  redis_clients
                                                the most seen while opening and holding
fds_wN  cpu_pct_per_1k_streams                  open files; % of a core per 1,000 streams
workers_lost  close_s  quiet_s                  workers that died (uvicorn replaces them);
                                                how long closing and going quiet took
error_kinds  missed                             the errors; the targets the step misses
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.concurrency_rig import Settled
from bench.concurrency_step import StepMeasure

TARGETS = {
    "errors": 0,
    "rss_kb_per_stream": 50,
    "redis_connections_per_process": 64,
    "loop_lag_p99_ms": 100,
    "bystander_ttft_x_idle": 2.0,
    "bystander_errors": 0,
}


@dataclass(frozen=True, slots=True)
class Idle:
    """The gateway before the first step: the bystander's TTFT (s) and the workers' RSS."""

    ttft_p50: float
    ttft_p99: float
    rss_kb: int


def _quantile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(1000 * value, 2)


def row_of(step: str, seen: StepMeasure, idle: Idle, expected: set[str], settled: Settled) -> dict[str, Any]:
    """One step's row: `expected` are the error kinds the step's story expects (the flooder's
    429s), counted apart from errors; `settled` how long the gateway took to close every
    connection once the clients dropped them, and to go quiet."""
    errors: Counter[str] = Counter()
    expected_count = 0
    for team, kinds in seen.errors.items():
        for kind, count in kinds.items():
            if f"{team} {kind}" in expected:
                expected_count += count
            else:
                errors[f"{team} {kind}"] += count
    streams = sum(seen.opened.values())
    workers = list(seen.before)
    rss_during = sum(seen.rss_kb_during.get(pid, 0) for pid in workers)
    rss_before = sum(seen.before[pid].rss_kb for pid in workers)
    ttft = seen.probe.ttfts
    p50, p99 = _quantile(ttft, 0.5), _quantile(ttft, 0.99)
    cores = sum(seen.cpu_s.values()) / seen.hold_s if seen.hold_s else 0.0
    row: dict[str, Any] = {
        "step": step,
        "streams": streams,
        "open_s": round(seen.open_s, 1),
        "errors": sum(errors.values()),
        "expected_429": expected_count if expected else None,
        "ttft_p50_ms": _ms(p50),
        "ttft_p99_ms": _ms(p99),
        "ttft_p50_x": round(p50 / idle.ttft_p50, 2) if p50 else None,
        "ttft_p99_x": round(p99 / idle.ttft_p99, 2) if p99 else None,
        "bystander_errors": sum(seen.probe.errors.values()),
    }
    for n, pid in enumerate(workers):
        row[f"lag_p99_ms_w{n}"] = _ms(_quantile(seen.lags.get(pid, []), 0.99))
    row["rss_kb_per_stream"] = round((rss_during - rss_before) / streams, 1) if streams else None
    for n, pid in enumerate(workers):
        row[f"redis_conns_w{n}"] = seen.redis_max.get(pid, 0)
    row["redis_conns_max_process"] = max(seen.redis_max.values(), default=0)
    row["redis_clients"] = seen.redis_clients_max
    for n, pid in enumerate(workers):
        row[f"fds_w{n}"] = seen.fds_max.get(pid)
    row["cpu_pct_per_1k_streams"] = round(100 * cores * 1000 / streams, 2) if streams else None
    row["workers_lost"] = len(seen.lost)  # uvicorn killed (health check) or a crash: its streams cut
    row["close_s"] = settled.close_s
    row["quiet_s"] = settled.quiet_s
    row["error_kinds"] = ", ".join(f"{kind}: {count}" for kind, count in errors.most_common()) or None
    if seen.probe.errors:
        row["bystander_error_kinds"] = ", ".join(f"{k}: {v}" for k, v in seen.probe.errors.items())
    row["missed"] = ", ".join(_missed(row)) or None
    return row


def _missed(row: dict[str, Any]) -> list[str]:
    lags = [value for key, value in row.items() if key.startswith("lag_p99_ms_w") and value is not None]
    checks = {
        "errors": row["errors"] == 0,
        "rss": row["rss_kb_per_stream"] is None or row["rss_kb_per_stream"] <= TARGETS["rss_kb_per_stream"],
        "redis": row["redis_conns_max_process"] <= TARGETS["redis_connections_per_process"],
        "lag": all(lag <= TARGETS["loop_lag_p99_ms"] for lag in lags),
        "ttft": all(
            x is not None and x <= TARGETS["bystander_ttft_x_idle"] for x in (row["ttft_p50_x"], row["ttft_p99_x"])
        ),
        "bystander_errors": row["bystander_errors"] == 0,
        "workers": row["workers_lost"] == 0,
    }
    return [name for name, met in checks.items() if not met]
