"""Gateway process settings, from the environment (`SWITCHYARD_*`).

Models and pools come from `switchyard.yaml`; these are the knobs of one gateway process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GatewaySettings(BaseSettings):
    """`SWITCHYARD_CONFIG`, `SWITCHYARD_HOST`, `SWITCHYARD_PORT`, ... (unset: the defaults)."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", frozen=True, extra="ignore")

    # switchyard.yaml to load; None: the repository's own.
    config: Path | None = None
    # Override the file's `gateway.host` / `gateway.port`.
    host: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    # The gRPC front door's port (`serve()` sets it from the file's `gateway.grpc_port`); None:
    # the app serves HTTP only (an app built by a test, say).
    grpc_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    # Freeze what start-up built out of the collector's full passes (config/startup_heap.py):
    # `serve()` sets it for its workers, processes of their own; an app a test builds in its
    # own process leaves the test runner's heap alone.
    freeze_heap: bool = False
    # The server stack under uvicorn (gateway/server.py): httptools' C parser on uvloop's loop,
    # or the pure-Python h11 on the standard library's (kept to measure one against the other:
    # docs/capacity.md, the relay's figures).
    http_protocol: Literal["httptools", "h11"] = "httptools"
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    # Gateway worker processes on the one port (state they share lives in Redis).
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    # Retry-After sent with 503s, in seconds.
    retry_after_s: Annotated[int, Field(ge=1)] = 5
    # An SSE comment line this often while a stream is idle keeps proxies from closing it and
    # notices a client that went away during a long prefill.
    sse_heartbeat_s: Annotated[float, Field(gt=0)] = 15.0
    # How long a cancel waits for the backend to end the stream before cancelling the task.
    cancel_grace_s: Annotated[float, Field(ge=0)] = 2.0
    # A line of stamps per request this process runs (docs/latency.md); None: none.
    latency_log: Path | None = None
    # prometheus-client's own variable (no SWITCHYARD_ prefix), set by `serve()` for its workers:
    # the folder where every worker writes its metrics and /metrics reads them all
    # (serving/metrics_registry.py). None: one process, its own registry.
    prometheus_multiproc_dir: Path | None = Field(default=None, validation_alias="PROMETHEUS_MULTIPROC_DIR")
