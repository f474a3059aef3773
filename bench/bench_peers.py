"""Peers: the project's gateway side by side with the gateways users would run instead, in one run.

    python -m bench peers [--quick] [--only NAME ...] [--hold S] [--logs DIR]
        (writes bench/results/peers.json; `make bench` runs the full size)

One paced OpenAI-compatible upstream (bench/paced_upstream.py: a token every 40 ms, 25 events
a second per stream, nothing computed) behind LiteLLM proxy (its per-key rpm/tpm limits on,
counted in Redis), SGLang's model gateway `smg` and `vllm-router`, each in a venv of its own
under var/peers/ (bench/peer_gateways.py); the project's gateway as `make up` runs it over its
paced backend at the same pace. The bare upstream goes first, with the same clients: what
every gateway adds to TTFT and latency is over it. Then each gateway in turn
(bench/peer_turn.py): 100, 1,000 and 2,500 open streams of `POST /v1/completions`
(`--quick`: 100 and 500), each held `--hold` s (12), then 10-token whole replies at 100 a
second for 10 s. Clients run in processes of their own (bench/peer_clients.py).

Per gateway, from /proc of its own processes (all of them, summed, less their idle CPU):
CPU per streamed event (µs, at the largest step it held with no error and at pace), CPU per
short request (ms), TTFT added over the bare upstream at the first step (p50/p99), RSS per
open stream (KB), the most streams held with no error; and the ratios the issue's targets
name (bench/peer_rows.py). A peer that cannot be installed or started is a row with `error`.

On the 2-core development machine the clients, the upstream and the gateway share the cores
with whatever else runs there: a step can outrun the machine (its `pace_kept` says so), and
the per-unit figures, not the rates, are what compare.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.peer_gateways import (
    PEERS,
    Gateway,
    running_litellm,
    running_router,
    running_switchyard,
    running_upstream,
)
from bench.peer_rows import EVENTS_PER_S, GatewaySeen, error_row, gateway_row, ratios
from bench.peer_turn import Addresses, Plan, measure
from config.process_limits import raise_open_files_limit
from report.result_files import format_table, write_result
from stack.local_stack import GATEWAY_WORKERS

NAME = "peers"
FIRST_MS = 0.0
GAP_MS = 1000 / EVENTS_PER_S
FULL = Plan(steps=(100, 1000, 2500), hold_s=12.0, probes=30, short_rate=100.0, short_s=10.0)
QUICK = Plan(steps=(100, 500), hold_s=5.0, probes=10, short_rate=50.0, short_s=4.0)
GATEWAYS = ("switchyard", *PEERS)

Starter = Callable[[Path, Gateway], AbstractContextManager[Gateway]]


def _starters() -> dict[str, Starter]:
    return {
        "switchyard": lambda root, _: running_switchyard(root, FIRST_MS / 1000, GAP_MS / 1000),
        "litellm": lambda root, upstream: running_litellm(root, upstream.port),
        "smg": lambda root, upstream: running_router("smg", root, upstream.port),
        "vllm-router": lambda root, upstream: running_router("vllm-router", root, upstream.port),
    }


@contextlib.contextmanager
def _folder(root: Path, name: str, logs: Path | None) -> Iterator[Path]:
    folder = root / name
    folder.mkdir()
    try:
        yield folder
    finally:
        if logs is not None:
            for log in folder.glob("*.log"):
                shutil.copyfile(log, logs / f"{name}-{log.name}")


def run(plan: Plan, names: tuple[str, ...], logs: Path | None = None) -> dict[str, Any]:
    """The bare upstream, then each gateway of `names`; the rows written and printed."""
    raise_open_files_limit()
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    addresses = Addresses()
    load_before = os.getloadavg()
    started = time.time()
    rows: list[dict[str, Any]] = []
    steps: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp, running_upstream(Path(tmp), FIRST_MS, GAP_MS) as up:
        print("peers: the bare upstream ...", file=sys.stderr, flush=True)
        bare = measure(up, None, plan, addresses)
        bare_row = gateway_row(bare, bare)
        steps["upstream"] = bare_row.pop("steps")
        for name in names:
            try:
                with _folder(Path(tmp), name, logs) as root, _starters()[name](root, up) as gateway:
                    seen: GatewaySeen = measure(gateway, None if name == "switchyard" else up, plan, addresses)
            except Exception as exc:  # a peer that fails is a row, not the end of the run
                print(f"peers: {name} failed: {exc}", file=sys.stderr, flush=True)
                traceback.print_exc(file=sys.stderr)
                rows.append(error_row(name, f"{type(exc).__name__}: {str(exc)[:600]}"))
                continue
            row = gateway_row(seen, bare)
            steps[name] = row.pop("steps")
            rows.append(row)
    meta = {
        "upstream": f"bench/paced_upstream.py: first token after {FIRST_MS:g} ms, then one every {GAP_MS:g} ms "
        f"({EVENTS_PER_S:g} events/s per stream)",
        "route": "POST /v1/completions (streamed for the steps, whole for the short requests)",
        "switchyard": f"{GATEWAY_WORKERS} uvicorn workers as `make up` (stack.local_stack.GATEWAY_WORKERS), "
        "real Redis (ACL, AOF), per-key caps on; its paced backend in-process at the same pace (no upstream hop)",
        "litellm": "default one uvicorn worker; model openai/paced at the upstream; per-key rpm/tpm limits "
        "(custom auth: no database for virtual keys) counted in its own Redis (ACL, AOF)",
        "routers": "smg launch / vllm-router with --worker-urls at the upstream, their defaults otherwise",
        "cpu": "utime+stime of every process of the gateway (descendants included), less its idle rate; "
        "Redis and the upstream apart",
        "clients": "raw asyncio sockets in processes of their own (niced), streams on one connection each, "
        "short requests on kept-alive connections, open loop",
        "plan": {
            "steps": plan.steps,
            "hold_s": plan.hold_s,
            "probes_per_step": plan.probes,
            "short_rate_per_s": plan.short_rate,
            "short_s": plan.short_s,
            "short_tokens": plan.short_tokens,
        },
        "bare_upstream": bare_row,
        "ratios": ratios(rows),
        "cpus": os.cpu_count(),
        "load_avg_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "seconds": round(time.time() - started),
        "steps": steps,
    }
    write_result(NAME, rows, meta)
    for name, table in steps.items():
        print(f"-- {name}: steps --")
        print(format_table([{k: v for k, v in step.items() if k != "error_kinds"} for step in table]))
    return {"rows": rows, "meta": meta}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="steps of 100 and 500 streams, 5 s holds")
    parser.add_argument("--only", nargs="+", choices=GATEWAYS, help="these gateways only (the bare upstream always)")
    parser.add_argument("--hold", type=float, help="seconds each step holds its streams")
    parser.add_argument("--logs", type=Path, help="copy each gateway's logs into this folder")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.hold is not None:
        plan = replace(plan, hold_s=args.hold)
    run(plan, tuple(args.only or GATEWAYS), args.logs)


if __name__ == "__main__":
    main()
