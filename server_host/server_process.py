"""`switchyard triton`: the process that owns one Triton server, and drains it on SIGTERM.

    switchyard triton --pool P [--copy K] [--server-id ID] [--ports HTTP,GRPC,METRICS]
      └─ tritonserver        own process group; the kernel SIGKILLs it if this process dies
           └─ Python stubs

    SIGTERM ─▶ registry: ID draining (gateways stop sending it work; needs --server-id)
            ─▶ wait until its engine has held no request for drain_settle_s
               (at most drain_timeout_s; a SIGINT meanwhile cuts it short)
            ─▶ stop tritonserver ─▶ exit 0 (EXIT_DRAINED)
    SIGINT  ─▶ stop tritonserver at once ─▶ exit 130
    tritonserver dies ─▶ exit with its code (1 if it was 0)
    meanwhile, with --server-id: its load and health published every fleet.load_publish_s
    (server_host/load_publisher.py), which gateways route by and the supervisor judges
    fenced (a newer registration holds its id: it was replaced while cut off) ─▶ stop at once,
               exit EXIT_FENCED, nothing written over its replacement (fleet_state/epochs.py)

The drain happens here, before Triton is signalled, because Triton's own SIGTERM handling
refuses new requests and waits only --exit-timeout-secs (3 s) for in-flight ones. This is the
process a supervisor runs and registers (its pid is the server's `pid`), so "SIGTERM to a
server's process drains it" holds whoever sends the signal: the supervisor acting on
`switchyard drain`, an operator's `kill`, or an init system.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import redis.asyncio

from config.redis_client import redis_client
from config.settings import Ports, SwitchyardConfig
from contracts.engine_metrics import parse_engine_health
from fleet_state.epochs import Fenced
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from server_host.leftovers import Reaped, reap_leftovers
from server_host.load_publisher import LoadPublisher
from server_host.self_registration import SelfRegistration
from server_host.signals import drain_on_sigterm
from server_host.triton_server import TritonServer, TritonStartError

EXIT_DRAINED = 0  # drained (or asked to drain before it was ready): a supervisor does not restart it
EXIT_STOPPED = 130  # SIGINT: stopped at once
EXIT_FENCED = 3  # replaced while it was unreachable: a supervisor does not restart it either
_POLL_S = 0.2


def run_triton(
    config: SwitchyardConfig,
    pool_id: str,
    ports: Ports | None = None,
    *,
    copy: int = 0,
    server_id: str | None = None,
    fill: bool = True,
    register_host: str | None = None,
    epoch: int | None = None,
    triton_root: Path | None = None,
) -> int:
    """Fill the pool's repository (unless `fill` is False), serve until a signal; returns the
    process exit code. `ports` default to copy `copy`'s (`PoolSpec.copy_ports`). The server
    binds `network.servers.bind_host`.
    `register_host`: register (as `server_id`, reachable at that host: it overrides
    `network.servers.advertise_host`) and heartbeat this server itself, where no supervisor
    does (a Kubernetes pod, which passes its pod IP). `epoch`: the registration its supervisor
    made for it (`ServerRegistry.next_epoch`); its load reports and drain carry it.
    `triton_root`: a full Triton install to run (`SWITCHYARD_TRITON_ROOT`); None: the wheel's."""
    from build_engines.repository import fill_repository

    if pool_id not in config.pools:
        raise KeyError(f"unknown pool {pool_id!r}; switchyard.yaml has {sorted(config.pools)}")
    ports = ports or config.pools[pool_id].copy_ports(copy)
    name = server_id or (pool_id if copy == 0 else f"{pool_id}-{copy}")
    repository = fill_repository(config, pool_id) if fill else config.pool_repository(pool_id)
    # Started from this (main) thread, so the kernel's kill-with-parent applies for our lifetime.
    network = config.network
    server = TritonServer(
        repository,
        ports,
        var_dir=config.var_path,
        name=name,
        inference_key=config.triton_inference_key(),  # only the gateway sends it
        host=network.servers.bind_host,
        keepalive=network.triton_grpc,
        die_with_parent=True,
        triton_root=triton_root,
    )
    _report_leftovers(name, reap_leftovers(name))  # of an earlier life of this server, killed
    with drain_on_sigterm() as shutdown:
        try:
            server.start(cancel=shutdown.requested)
        except TritonStartError as exc:
            if shutdown.requested.is_set():  # asked to go before it served anything
                return EXIT_STOPPED if shutdown.immediate.is_set() else EXIT_DRAINED
            print(f"tritonserver {name!r} did not start: {exc}", file=sys.stderr, flush=True)
            return 1
        registration = None
        if register_host is not None:
            registration = SelfRegistration(config, _self_info(pool_id, name, register_host, ports))
            registration.start()
        publisher = None
        if server_id is not None:  # registered (by a supervisor or itself): routed by its load
            # Probed from here, on this host (loopback for a wildcard bind).
            own = registration
            publisher = LoadPublisher(
                config, pool_id, server_id, f"{server.http_url}/v2/health/ready", server.metrics_url,
                epoch=lambda: epoch if own is None else own.epoch,
            )  # fmt: skip
            publisher.start()
        try:
            print(
                f"triton {name!r} (pool {pool_id!r}) ready: http {server.http_url}, grpc {server.grpc_url}, "
                f"metrics {server.metrics_url}, log {server.log_path}",
                flush=True,
            )
            while not shutdown.requested.wait(0.5):
                if (registration is not None and registration.fenced.is_set()) or (
                    publisher is not None and publisher.fenced.is_set()
                ):
                    print(f"triton {name!r}: fenced (replaced while unreachable); stopping", flush=True)
                    return EXIT_FENCED
                code = server.poll()
                if code is not None:
                    print(f"tritonserver exited with code {code}\n{server.log_tail()}", file=sys.stderr, flush=True)
                    return code or 1
            if shutdown.immediate.is_set():
                return EXIT_STOPPED
            if server_id is not None:
                _mark_draining(config, server_id, epoch if registration is None else registration.epoch)
            print(f"triton {name!r}: draining (waiting for in-flight requests)", flush=True)
            drained = wait_for_drain(
                lambda: _in_flight(server.metrics_url),
                settle_s=config.fleet.drain_settle_s,
                timeout_s=config.fleet.drain_timeout_s,
                abort=lambda: shutdown.immediate.is_set() or server.poll() is not None,
            )
            print(f"triton {name!r}: {'drained' if drained else 'drain cut short'}; stopping", flush=True)
            return EXIT_STOPPED if shutdown.immediate.is_set() else EXIT_DRAINED
        finally:
            if publisher is not None:
                publisher.stop()
            if registration is not None:
                registration.stop()
            server.stop(timeout_s=15.0)
            _report_leftovers(name, reap_leftovers(name))


def _self_info(pool_id: str, server_id: str, host: str, ports: Ports) -> ServerInfo:
    now = time.time()
    return ServerInfo(
        server_id, pool_id, host, ports.http, ports.grpc, ports.metrics, (), ServerState.STARTING, now, now,
        pid=os.getpid(),
    )  # fmt: skip


def _report_leftovers(name: str, reaped: Reaped) -> None:
    if reaped.processes or reaped.shm_files:
        print(
            f"triton {name!r}: removed {reaped.processes} orphaned stub processes and "
            f"{reaped.shm_files} shared-memory regions of earlier runs",
            file=sys.stderr,
            flush=True,
        )


def wait_for_drain(
    in_flight: Callable[[], int | None],
    *,
    settle_s: float,
    timeout_s: float,
    abort: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll `in_flight()` (None: unknown) until it has read 0 for `settle_s`: True. False after
    `timeout_s`, or as soon as `abort()` says so.

    The settle time covers requests on their way in: gateways read the DRAINING state up to a
    refresh later, and a request the server took is in the engine only after preprocessing.
    """
    began = clock()
    empty_since: float | None = None
    while not abort():
        now = clock()
        if now - began > timeout_s:
            return False
        if in_flight() == 0:
            empty_since = now if empty_since is None else empty_since
            if now - empty_since >= settle_s:
                return True
        else:
            empty_since = None
        sleep(_POLL_S)
    return False


def _in_flight(metrics_url: str) -> int | None:
    try:
        response = httpx.get(metrics_url, timeout=2.0)
        response.raise_for_status()
        return parse_engine_health(response.text).in_flight
    except (httpx.HTTPError, ValueError):
        return None


def _mark_draining(config: SwitchyardConfig, server_id: str, epoch: int | None) -> None:
    """DRAINING in the registry, so gateways stop routing here; a drain goes on without it."""

    async def mark() -> bool:
        client = redis_client(config, "fleet", socket_timeout=2.0, max_connections=2)  # one write
        try:
            registry = ServerRegistry(client, config.fleet.dead_after_s)
            return await registry.set_state(server_id, ServerState.DRAINING, time.time(), epoch=epoch)
        finally:
            await client.aclose()

    try:
        if not asyncio.run(mark()):
            print(f"server {server_id!r} is not registered in {config.redis.address}", file=sys.stderr, flush=True)
    except Fenced:
        print(f"server {server_id!r} was replaced: its record is not ours to mark", file=sys.stderr, flush=True)
    except (OSError, redis.RedisError) as exc:
        print(f"could not mark {server_id!r} draining in {config.redis.address}: {exc}", file=sys.stderr, flush=True)
