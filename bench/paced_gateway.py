"""The gateway as `make up` runs it, over the paced backend: a process of its own.

    python -m bench.paced_gateway CONFIG --port P [--grpc-port G] [--workers 2] --lag-dir DIR

As `gateway.server.serve` runs it: uvicorn with `--workers` processes on one port (the same
protocol, backlog and keep-alive), the gRPC door in each worker on `--grpc-port`, metrics
shared through a multiprocess folder, the open-files limit raised and inherited. What differs
is the backend: `bench.paced_backend.PacedBackend` instead of Triton (so no token is
computed and only the gateway's own work is measured) and a fixed, ample KV capacity per pool;
and each worker runs the bench's loop-lag probe (bench/loop_lag.py). Keys, leases, request
records and usage go to the real Redis of CONFIG.

uvicorn's workers build their app from the environment (its factory takes no arguments), so
this process hands them the configuration, the door's port and the lag folder in
`SWITCHYARD_*` variables, as `serve` does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from bench.loop_lag import lag_recorded
from bench.paced_backend import Pace, PacedBackend
from config.process_limits import raise_open_files_limit
from config.settings import load_config

LAG_DIR_ENV = "SWITCHYARD_BENCH_LAG_DIR"
PACE_ENV = "SWITCHYARD_BENCH_PACE"  # "first_s,gap_low_s,gap_high_s", when not PACE
# Thousands of slow streams: the first token at once (a bystander's TTFT is then the gateway's
# own path), then one every 1-2 s, jittered so the streams do not wake together.
PACE = Pace(first_s=0.0, gap_s=(1.0, 2.0))
CAPACITY_TOKENS = 10**12  # every pool's KV: admission never waits on it


def pace_of(text: str | None) -> Pace:
    """`PACE`, or the pace "first_s,gap_low_s,gap_high_s" names."""
    if not text:
        return PACE
    first_s, low_s, high_s = (float(part) for part in text.split(","))
    return Pace(first_s, (low_s, high_s))


def app_from_environment() -> FastAPI:
    """One worker's app (uvicorn's factory): the real gateway over the paced backend."""
    from gateway.app import create_app  # the worker's imports, not the launcher's
    from gateway.settings import GatewaySettings
    from quota.capacity import StaticCapacity

    settings = GatewaySettings()
    config = load_config(settings.config)
    pools = {pool_id: pool.model_id for pool_id, pool in config.pools.items()}
    backend = PacedBackend(pace_of(os.environ.get(PACE_ENV)), pools, seed=os.getpid())
    capacity = StaticCapacity(dict.fromkeys(pools, CAPACITY_TOKENS))
    app = create_app(settings, lambda *_: backend, config, capacity)
    gateway_lifespan = app.router.lifespan_context
    lag_dir = Path(os.environ[LAG_DIR_ENV])

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with lag_recorded(lag_dir), gateway_lifespan(app):
            yield

    app.router.lifespan_context = lifespan
    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from config.logging_setup import logging_config
    from gateway.server import WORKER_HEALTHCHECK_S, uvicorn_stack
    from gateway.settings import GatewaySettings
    from serving.metrics_registry import MULTIPROC_DIR_ENV, fresh_multiprocess_dir

    parser = argparse.ArgumentParser(prog="python -m bench.paced_gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lag-dir", type=Path, required=True)
    parser.add_argument("--pace", help="first_s,gap_low_s,gap_high_s (default: thousands of slow streams' pace)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    raise_open_files_limit()  # a socket per open stream; the workers inherit it
    os.environ["SWITCHYARD_CONFIG"] = str(args.config.resolve())
    os.environ["SWITCHYARD_WORKERS"] = str(args.workers)
    os.environ[LAG_DIR_ENV] = str(args.lag_dir.resolve())
    if args.pace is not None:
        pace_of(args.pace)  # a bad one fails here, not in every worker
        os.environ[PACE_ENV] = args.pace
    if args.grpc_port is not None:
        os.environ["SWITCHYARD_GRPC_PORT"] = str(args.grpc_port)
    metrics_dir = config.var_path / "run" / f"prometheus-gateway-{args.port}"
    os.environ[MULTIPROC_DIR_ENV] = str(fresh_multiprocess_dir(metrics_dir))
    uvicorn.run(  # gateway.server.serve's options
        "bench.paced_gateway:app_from_environment",
        factory=True,
        workers=args.workers,
        host="127.0.0.1",
        port=args.port,
        log_config=logging_config("INFO"),
        timeout_keep_alive=30,
        **uvicorn_stack(GatewaySettings()),  # SWITCHYARD_HTTP_PROTOCOL, SWITCHYARD_EVENT_LOOP
        backlog=8192,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
