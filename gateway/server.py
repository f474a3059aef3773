"""Run the gateway under uvicorn: what `switchyard gateway` and `python -m gateway` call.

With `SWITCHYARD_WORKERS` > 1, uvicorn runs that many worker processes on one port. Every
piece of state they must agree on (keys, leases, usage, request records, cancels) lives in
Redis, so any worker can answer any request, a DELETE included. Metrics they share through
files (prometheus-client's multiprocess mode, serving/metrics_registry.py), so `/metrics` on
any worker shows the whole gateway.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI

from config.environment import environment_variables
from config.logging_setup import logging_config
from config.process_limits import raise_open_files_limit
from config.settings import SwitchyardConfig, dump_config, load_config
from gateway.app import create_app
from gateway.http_protocol import NoDelayH11Protocol
from gateway.httptools_protocol import NoDelayHttpToolsProtocol
from gateway.settings import GatewaySettings
from serving.metrics_registry import fresh_multiprocess_dir

# How long a worker may take to answer the supervisor's health ping before it is restarted.
WORKER_HEALTHCHECK_S = 30


def serve(
    config: SwitchyardConfig,
    host: str | None = None,
    port: int | None = None,
    settings: GatewaySettings | None = None,
) -> None:
    """Serve until interrupted. Address: the arguments, else `SWITCHYARD_HOST`/`_PORT`, else
    the file's `gateway:` section."""
    settings = settings if settings is not None else GatewaySettings()
    host = host or settings.host or config.gateway.host
    port = port or settings.port or config.gateway.port
    # The gRPC door (gateway/grpc_door/server.py): each worker serves it from its lifespan.
    grpc_port = settings.grpc_port or config.gateway.grpc_port
    settings = settings.model_copy(update={"grpc_port": grpc_port, "freeze_heap": True})
    raise_open_files_limit()  # a socket per open stream; the workers inherit it
    options = {
        "host": host,
        "port": port,
        "log_config": logging_config("INFO"),  # JSON lines, in every worker
        # SSE replies carry their own keep-alive comments; don't cut slow clients short.
        "timeout_keep_alive": 30,
        **uvicorn_stack(settings),
        # Connections not yet accepted: room for a burst of thousands of streams opening at
        # once (uvicorn's default is 2,048; the kernel's net.core.somaxconn caps it).
        "backlog": 8192,
    }
    if settings.workers == 1:
        uvicorn.run(create_app(settings, config=config), **options)  # type: ignore[arg-type]
        return
    # The workers' metrics folder is emptied below: not while another gateway serves this port,
    # or its counts would vanish under it.
    _refuse_if_in_use(host, port)
    if grpc_port is not None:  # the workers share it with SO_REUSEPORT: never with another gateway
        _refuse_if_in_use(host, grpc_port)
    # One /metrics for all workers: each writes its metrics under this folder, emptied here
    # before any worker starts (prometheus_client reads the variable when a worker imports it).
    metrics_dir = config.var_path / "run" / f"prometheus-gateway-{port}"
    # Workers are fresh processes that build the app from the environment (GatewaySettings):
    # hand them these settings, with this exact configuration through a file.
    for_workers = settings.model_copy(
        update={
            "config": dump_config(config, config.var_path / "run" / "gateway.yaml"),
            "prometheus_multiproc_dir": fresh_multiprocess_dir(metrics_dir),
        }
    )
    os.environ.update(environment_variables(for_workers))
    uvicorn.run(
        "gateway.server:app_from_environment",
        factory=True,
        workers=settings.workers,
        # uvicorn's supervisor restarts a worker that does not answer its ping within this:
        # 5 s by default, which a worker busy with thousands of streams opening at once can
        # miss, and its restart would cut every stream it holds.
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        **options,  # type: ignore[arg-type]
    )


def uvicorn_stack(settings: GatewaySettings) -> dict[str, Any]:
    """uvicorn's `http` and `loop` options for `settings`: by default httptools' C parser on
    uvloop (what uvicorn's `[standard]` extra installs), each protocol with TCP_NODELAY, a
    deadline on request heads and JSON refusals (gateway/http_protocol.py). The gRPC door's
    grpc.aio server runs on the same loop, uvloop's included."""
    protocol = NoDelayHttpToolsProtocol if settings.http_protocol == "httptools" else NoDelayH11Protocol
    return {"http": protocol, "loop": settings.event_loop}


def _refuse_if_in_use(host: str, port: int) -> None:
    """Exit if something listens on `host:port` (bound as uvicorn binds it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SystemExit(f"cannot serve the gateway on {host}:{port}: {exc}") from None


def app_from_environment() -> FastAPI:
    """The app of one worker process (uvicorn's factory)."""
    return create_app(GatewaySettings())


def main() -> None:
    settings = GatewaySettings()
    serve(load_config(settings.config), settings=settings)
