"""Concurrency: how many open streams one two-worker gateway holds, and what each costs.

    python -m bench concurrency [--quick | --max-streams N] [--hold S] [--logs DIR]
        (writes bench/results/concurrency.json; `make bench` runs the full size)

One gateway as `make up` runs it (uvicorn, two worker processes on one port, the gRPC door in
each, a real Redis with ACL users and AOF) over a paced backend: no token is computed, each
stream gets its first event at once, then one every 1-2 s, jittered (bench/paced_gateway.py),
so what is measured is the gateway holding streams. Clients run in processes of their own,
niced, never on the gateway's event loops: SSE on raw asyncio sockets (bench/sse_streams.py
says why not httpx), gRPC with tritonclient.grpc.aio, all of a process's calls on one loop
(bench/door_streams.py). Each step is opened (generous deadlines: 60 s + 25 ms a stream),
held `--hold` seconds (25), closed, and the gateway left to go quiet before the next:

    sse N     N concurrent `POST /v1/generate` streams (`stream: true`: the native route, no
              chat template to render) of team `load`: 1,000, 2,500, 5,000, 10,000
    grpc N    N concurrent `ModelStreamInfer` calls through the door, team `load`: 2,000
    flood     team `flooder` opens 3x its share of stream slots, then team `bystander` a
              quarter of the workers' reserve beside it

A team's share of a worker's stream slots = gateway.max_streams_per_worker (6,000) x its
weight / the weights of the teams holding streams; in the flood those are the flooder (1) and
the bystander (2), so the flooder asks for 3 x 2,000 x 2 workers = 12,000 streams. (Dividing
by every configured team's weight, with `load`'s, its share is 1,500: either way the flood
runs past the borrowing limit.) Its 429s are expected and counted apart; any 503 is an error.

Measured per step (bench/concurrency_rows.py has the columns): errors by kind (HTTP status and
the gateway's error code, gRPC status, or exception class); the bystander's TTFT, ten
10-token requests on new connections during the hold (first event only), p50/p99 over idle
(before the first step); each worker's event-loop lag p99 (a bench-only probe in each worker,
bench/loop_lag.py: the gateway exports none); RSS per open stream (the workers' summed RSS,
the most seen during the hold, less before the step); Redis connections per worker (CLIENT
LIST joined to `ss` by port, the most seen while opening and holding); open files per worker;
CPU per 1,000 streams (the workers' utime + stime over the hold). A worker that stops
answering uvicorn's health check for 5 s is killed and replaced (as under `make up`): the
step counts it in `workers_lost`.

On the 2-core development machine the clients' CPU (~0.1 ms an event) and the gateway's share
the same cores, and other work on the machine adds its own: ratios to idle measured there are
upper bounds for a gateway with cores of its own.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.concurrency_rig import Rig, RigSettings, log_warnings, running_rig, settle
from bench.concurrency_rows import TARGETS, Idle, row_of
from bench.concurrency_step import Load, Probe, run_step
from bench.door_streams import DoorSpec, run_door_load
from bench.paced_gateway import PACE
from bench.process_stats import samples
from bench.sse_streams import LoadSpec, Target, probe_ttfts, run_load
from config.process_limits import raise_open_files_limit
from report.result_files import write_result

NAME = "concurrency"
WEIGHTS = {"load": 1.0, "bystander": 2.0, "flooder": 1.0}
RESERVE_FRACTION = 0.1  # gateway.stream_reserve_fraction
OPEN_CONCURRENCY = 32  # streams being opened at once, per client process
STREAMS_PER_PROCESS = 2500
REPLY_TOKENS = 1000  # at 1-2 s a token: open far longer than any step


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps' sizes and timing."""

    steps: tuple[int, ...]
    door_streams: int
    hold_s: float
    max_streams_per_worker: int
    workers: int = 2
    probes: int = 10
    door_processes: int = 2
    door_channels: int = 4  # per process

    def open_deadline_s(self, streams: int) -> float:
        return 60.0 + streams / 40


# max_streams_per_worker: 60% of the top step per worker (the configuration's default, 6,000),
# so 10,000 fit with room for the kernel handing one worker more connections than the other.
FULL = Plan(steps=(1000, 2500, 5000, 10000), door_streams=2000, hold_s=25.0, max_streams_per_worker=6000)


def scaled(max_streams: int, hold_s: float) -> Plan:
    """FULL's steps scaled to top out at `max_streams`; a worker may hold them all (at a small
    size the kernel's split between workers is uneven in proportion)."""
    factor = max_streams / FULL.steps[-1]
    steps = tuple(sorted({max(1, round(step * factor)) for step in FULL.steps}))
    door = max(1, round(FULL.door_streams * factor))
    return replace(FULL, steps=steps, door_streams=door, hold_s=hold_s, max_streams_per_worker=max_streams)


def flood_share(plan: Plan) -> int:
    """The flooder's share of one worker's stream slots while it and the bystander hold streams."""
    holding = WEIGHTS["flooder"] + WEIGHTS["bystander"]
    return max(1, math.floor(plan.max_streams_per_worker * WEIGHTS["flooder"] / holding))


def bystander_streams(plan: Plan) -> int:
    """The bystander's streams in the flood: a quarter of the room the workers keep from
    borrowers (the reserve), so it finds them at once whatever the flooder holds."""
    reserve = math.ceil(plan.max_streams_per_worker * RESERVE_FRACTION)
    return max(1, reserve * plan.workers // 4)


class _Addresses:
    """A loopback source address per client process (127.0.1.x): each has a port range of its
    own, so closed streams' TIME_WAITs never run a step out of ports."""

    def __init__(self) -> None:
        self._next = 0

    def take(self) -> str:
        self._next += 1
        return f"127.0.{1 + self._next // 250}.{1 + self._next % 250}"


def _sse_loads(rig: Rig, plan: Plan, team: str, streams: int, addresses: _Addresses) -> list[Load]:
    target = Target("127.0.0.1", rig.http_port, rig.keys[team], "small")
    processes = 1 if streams <= 500 else max(2, math.ceil(streams / STREAMS_PER_PROCESS))
    shares = [streams // processes + (i < streams % processes) for i in range(processes)]
    return [
        Load(
            team,
            run_load,
            LoadSpec(target, addresses.take(), share, REPLY_TOKENS, OPEN_CONCURRENCY, plan.open_deadline_s(streams)),
        )
        for share in shares
        if share
    ]


def _door_loads(rig: Rig, plan: Plan) -> list[Load]:
    streams = plan.door_streams
    processes = min(plan.door_processes, streams)
    loads = []
    for i in range(processes):
        share = streams // processes + (i < streams % processes)
        spec = DoorSpec(
            f"127.0.0.1:{rig.grpc_port}", rig.keys["load"], "small", share, min(plan.door_channels, share),
            REPLY_TOKENS, OPEN_CONCURRENCY, plan.open_deadline_s(streams),
        )  # fmt: skip
        loads.append(Load("load", run_door_load, spec))
    return loads


def measure(plan: Plan, logs: Path | None = None) -> dict[str, Any]:
    """Every step of `plan` on one rig: {"rows": [...], "meta": {...}}; the gateway's and
    Redis's logs copied into `logs` if given."""
    soft, hard = raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    settings = RigSettings(plan.workers, plan.max_streams_per_worker, RESERVE_FRACTION, WEIGHTS)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp, running_rig(settings, Path(tmp)) as rig:
        addresses = _Addresses()
        bystander = Target("127.0.0.1", rig.http_port, rig.keys["bystander"], "small")
        probe = Probe(bystander, "127.0.0.2", plan.probes)
        probe_ttfts(bystander, "127.0.0.2", 2 * plan.workers, 0.1)  # warm: first requests load what they use
        idle_samples = samples(rig.worker_pids())
        idle_probe = probe_ttfts(bystander, "127.0.0.2", plan.probes, 0.3)
        if idle_probe.errors or not idle_probe.ttfts:
            raise RuntimeError(f"the bystander's requests failed on the idle gateway: {idle_probe.errors}")
        idle = Idle(
            sorted(idle_probe.ttfts)[len(idle_probe.ttfts) // 2],
            max(idle_probe.ttfts),  # a handful of requests: their p99 is their slowest
            sum(s.rss_kb for s in idle_samples.values()),
        )
        baseline_fds = {pid: s.open_fds for pid, s in idle_samples.items()}
        steps: list[tuple[str, list[list[Load]], set[str]]] = [
            (f"sse {streams}", [_sse_loads(rig, plan, "load", streams, addresses)], set()) for streams in plan.steps
        ]
        if plan.door_streams:
            steps.append((f"grpc {plan.door_streams}", [_door_loads(rig, plan)], set()))
        share = flood_share(plan)
        flood = 3 * share * plan.workers
        beside = bystander_streams(plan)
        waves = [
            _sse_loads(rig, plan, "flooder", flood, addresses),
            _sse_loads(rig, plan, "bystander", beside, addresses),
        ]
        steps.append((f"flood {flood}+{beside}", waves, {"flooder http 429 team_streams_over_share"}))
        failed = None
        for name, step_waves, expected in steps:
            streams = sum(load.spec.streams for wave in step_waves for load in wave)
            print(f"concurrency: {name} ...", file=sys.stderr, flush=True)
            try:
                seen = run_step(rig, step_waves, plan.hold_s, probe, plan.open_deadline_s(streams) + 120)
            except RuntimeError as exc:  # clients that never reported: keep the steps measured
                failed = f"{name}: {exc}"
                break
            rows.append(row_of(name, seen, idle, expected, settle(rig)))
        meta = {
            "gateway": f"{plan.workers} uvicorn workers (bench/paced_gateway.py), gRPC door on, real Redis (ACL, AOF)",
            "backend": f"paced: first event at once, then one every {PACE.gap_s[0]:g}-{PACE.gap_s[1]:g} s, jittered",
            "sse_route": "POST /v1/generate, stream: true",
            "clients": "raw asyncio sockets (SSE), tritonclient.grpc.aio (gRPC); processes of their own",
            "hold_s": plan.hold_s,
            "gateway_settings": rig.applied,
            "weights": WEIGHTS,
            "flood": {
                "flooder_share_per_worker": share,
                "share_rule": "max_streams_per_worker x weight / weights of the teams holding streams",
                "flooder_share_per_worker_over_all_teams": math.floor(
                    plan.max_streams_per_worker * WEIGHTS["flooder"] / sum(WEIGHTS.values())
                ),
                "flooder_streams_asked": flood,
                "bystander_streams": beside,
            },
            "idle_ttft_p50_ms": round(1000 * idle.ttft_p50, 2),
            "idle_ttft_p99_ms": round(1000 * idle.ttft_p99, 2),
            "idle_rss_mb": round(idle.rss_kb / 1024, 1),
            "idle_fds": list(baseline_fds.values()),
            "workers_at_start": list(idle_samples),
            "workers_at_end": rig.worker_pids(),
            "cpus": os.cpu_count(),
            "nofile_limit": [soft, hard],
            "targets": TARGETS,
            "gateway_log": log_warnings(rig.log_path),
            "failed": failed,
        }
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for path in (rig.log_path, Path(tmp) / "redis.log"):
                shutil.copyfile(path, logs / path.name)
    return {"rows": rows, "meta": meta}


def run(plan: Plan, logs: Path | None = None) -> dict[str, Any]:
    """`measure(plan)`, written to bench/results/concurrency.json and printed."""
    result = measure(plan, logs)
    write_result(NAME, result["rows"], result["meta"])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench concurrency", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a smoke test: steps up to 200 streams, 5 s holds")
    size.add_argument("--max-streams", type=int, help="scale the steps to top out at N streams")
    parser.add_argument("--hold", type=float, help=f"seconds each step holds its streams (default {FULL.hold_s:g})")
    parser.add_argument("--logs", type=Path, help="copy the gateway's and Redis's logs into this folder")
    args = parser.parse_args(argv)
    if args.max_streams is not None and args.max_streams < 1:
        parser.error("--max-streams must be at least 1")
    plan = FULL
    if args.quick:
        plan = scaled(200, 5.0)
    elif args.max_streams is not None:
        plan = scaled(args.max_streams, FULL.hold_s)
    if args.hold is not None:
        plan = replace(plan, hold_s=args.hold)
    failed = run(plan, args.logs)["meta"]["failed"]
    if failed:
        raise SystemExit(f"concurrency: stopped at {failed}")


if __name__ == "__main__":
    main()
