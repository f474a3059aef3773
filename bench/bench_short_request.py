"""What one short request costs the gateway: its worker's CPU and the Redis commands it sends.

    python -m bench short-request [--requests N] [--quick]

The gateway as `make up` runs it (two uvicorn workers, the real auth, admission, idempotency
and metering on a real Redis) over the paced backend replying at once (bench/paced_gateway.py:
no token computed, so only the gateway's own work is measured), and a client in this process
sending requests one after another on a kept-alive connection (so one worker serves them).
The workers' CPU comes from /proc (utime + stime over the measured requests, summed over both
workers, divided by the requests): the client's CPU is not in it, unlike `bench scale`'s
in-process figure. Redis commands: those the
gateway sends (MONITOR, not counting the ones run inside scripts) and those Redis runs
(INFO commandstats, scripts' own included).

Cases: 10-token replies streamed (SSE) and whole, each with and without a caller-made
request_id (which keeps the result for repeats). Targets (issue 30): ≤ 1.5 ms of gateway CPU
and ≤ 6 Redis commands sent per request.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.concurrency_rig import RigSettings, running_rig
from bench.process_stats import cpu_seconds
from bench.redis_commands import ClientCommands
from report.result_files import write_result

NAME = "short_request"
REPLY_TOKENS = 10
TARGET_CPU_MS = 1.5
TARGET_COMMANDS = 6
# The paced backend's first token at once and the rest with no gap: a reply as fast as the
# gateway takes it.
INSTANT = "0,0,0"


def _executed(r: redis.Redis) -> int:
    stats: dict[str, dict[str, int]] = r.info("commandstats")  # type: ignore[assignment]
    return sum(stat["calls"] for name, stat in stats.items() if name not in ("cmdstat_info", "cmdstat_monitor"))


def _cpu(pids: list[int]) -> float:
    """The workers' CPU seconds so far, summed."""
    total = 0.0
    for pid in pids:
        cpu = cpu_seconds(pid)
        if cpu is None:
            raise RuntimeError(f"gateway worker {pid} is gone")
        total += cpu
    return total


def _send(client: httpx.Client, stream: bool, with_id: bool, tag: str) -> None:
    body: dict[str, Any] = {"model": "small", "prompt": "the quick brown fox", "max_tokens": REPLY_TOKENS}
    body["stream"] = stream
    if with_id:
        body["request_id"] = f"short-{tag}-{time.time_ns()}"
    response = client.post("/v1/generate", json=body)
    if response.status_code != 200 or "length" not in response.text:
        raise RuntimeError(f"request failed: {response.status_code} {response.text[:300]}")


def _settled(admin: redis.Redis, timeout_s: float = 30.0) -> None:
    """Until the last request's end writes landed: its lease released (nothing leased)."""
    deadline = time.monotonic() + timeout_s
    while admin.zcard("sy:lease:expiry"):
        if time.monotonic() > deadline:
            raise RuntimeError("leases still held long after the last request")
        time.sleep(0.02)


def measure(requests: int) -> dict[str, Any]:
    """Every case's row, `requests` requests each (nothing written)."""
    settings = RigSettings(workers=2, max_streams_per_worker=None, stream_reserve_fraction=None,
                           weights={"bench": 1.0}, pace=INSTANT)  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-short-") as tmp, running_rig(settings, Path(tmp)) as rig:
        workers = rig.worker_pids()
        headers = {"Authorization": f"Bearer {rig.keys['bench']}"}
        counter = ClientCommands(rig.config.redis_url("admin"))
        base_url = f"http://127.0.0.1:{rig.http_port}"
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
            for stream in (True, False):
                for with_id in (False, True):
                    for i in range(50):  # warm: scripts loaded, caches filled, the connection open
                        _send(client, stream, with_id, f"warm{i}")
                    _settled(rig.admin)
                    sent, executed = counter.count(), _executed(rig.admin)
                    cpu_before, started = _cpu(workers), time.perf_counter()
                    latencies: list[float] = []
                    for i in range(requests):
                        begun = time.perf_counter()
                        _send(client, stream, with_id, str(i))
                        latencies.append(time.perf_counter() - begun)
                    _settled(rig.admin)
                    cpu_after, elapsed = _cpu(workers), time.perf_counter() - started
                    rows.append(
                        {
                            "case": f"{REPLY_TOKENS} tokens, {'SSE' if stream else 'whole'}, "
                            f"{'caller id' if with_id else 'no id'}",
                            "gateway_cpu_ms_per_request": round((cpu_after - cpu_before) * 1e3 / requests, 3),
                            "redis_commands_sent": round((counter.count() - sent) / requests, 2),
                            "redis_commands_run": round((_executed(rig.admin) - executed) / requests, 2),
                            "latency_p50_ms": round(statistics.median(latencies) * 1e3, 2),
                            "requests_per_s": round(requests / elapsed, 1),
                        }
                    )
        counter.stop()
    meta = {
        "requests_per_case": requests,
        "reply_tokens": REPLY_TOKENS,
        "targets": {"gateway_cpu_ms_per_request": TARGET_CPU_MS, "redis_commands_sent": TARGET_COMMANDS},
    }
    return {"rows": rows, "meta": meta}


def run(requests: int) -> dict[str, Any]:
    result = measure(requests)
    write_result(NAME, result["rows"], result["meta"])  # prints the table too
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench short-request", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per case (default 1000)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: 50 requests per case")
    args = parser.parse_args(argv)
    run(50 if args.quick else args.requests)
