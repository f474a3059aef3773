"""`create_app()`: the gateway's FastAPI application.

Nothing happens at import time. `create_app` wires routes, error handlers and a Prometheus
registry; the lifespan loads `switchyard.yaml`, the models' tokenizers, the backend (one Triton
gRPC client per pool) and the Redis-backed parts every gateway process shares (keys, leases,
usage, request records, the cancel bus), and tears them down at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import redis.asyncio as redis
from fastapi import FastAPI

from bulk.blob_store import LocalBlobStore
from bulk.intake import BatchIntake
from config.batched_scripts import BatchedScripts
from config.redis_client import redis_client as gateway_redis_client
from config.replica_acks import ReplicaAcks
from config.settings import SwitchyardConfig, load_config
from config.startup_heap import freeze_startup_heap
from contracts.catalog import ModelCatalog
from contracts.generation import GenerationBackend, TtftPredictor
from contracts.latency_log import LatencyLog
from contracts.openai_wire.chat_template import ChatTemplates
from fleet_state.registry import ServerRegistry
from gateway.auth import install_auth
from gateway.console import install_console, open_console
from gateway.deps import Services, install_metering
from gateway.edge_guard import EdgeGuard, install_edge
from gateway.edge_keys import KeyCache
from gateway.error_handlers import install_error_handlers
from gateway.key_slots import KeySlots
from gateway.openapi_document import install_openapi
from gateway.routes import api_router
from gateway.settings import GatewaySettings
from quota.admission import Admission
from quota.capacity import CapacityMonitor, CapacitySource, config_metrics_urls
from quota.key_files import load_admin_key_hash
from quota.keys import KeyStore
from quota.usage import UsageMeter
from router.failover_backend import FailoverBackend
from serving.generation import GenerationService
from serving.idempotency import IdempotencyStore
from serving.metrics import GatewayMetrics
from serving.request_bus import RequestBus
from serving.requests_registry import RequestRegistry

# Connections of a worker's pool for reads that wait: the request bus's subscription holds one,
# each follower of a request another worker runs holds one for up to a second at a time.
WAITING_CONNECTIONS = 8


def triton_backend_factory(
    config: SwitchyardConfig, settings: GatewaySettings, metrics: GatewayMetrics
) -> GenerationBackend:
    """The production backend: Triton's `llm` model over gRPC on the fleet's servers, routed
    and failed over (router/failover_backend.py)."""
    from router.routing_setup import failover_backend  # tritonclient is heavy; load it only here

    return failover_backend(config, metrics.routed, retry_after_s=settings.retry_after_s)


@contextlib.asynccontextmanager
async def _polled_capacity(config: SwitchyardConfig, backend: GenerationBackend) -> AsyncIterator[CapacitySource]:
    """Each pool's KV capacity: the fleet backend's directory already reads every server's
    metrics; another backend gets its configured servers polled in the background."""
    if isinstance(backend, FailoverBackend) and backend.capacity is not None:
        yield backend.capacity
        return
    async with httpx.AsyncClient() as client:
        servers = config.network.servers.advertised
        monitor = CapacityMonitor(lambda: config_metrics_urls(config, servers), client, config.quota.capacity_refresh_s)
        await monitor.refresh()
        task = asyncio.create_task(monitor.run(), name="capacity-monitor")
        try:
            yield monitor
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# Builds the backend in the app's lifespan, with the app's metrics for what it counts (tests
# pass one that returns a fake).
BackendFactory = Callable[[SwitchyardConfig, GatewaySettings, GatewayMetrics], GenerationBackend]


def create_app(
    settings: GatewaySettings | None = None,
    backend_factory: BackendFactory | None = None,
    config: SwitchyardConfig | None = None,
    capacity: CapacitySource | None = None,
    catalog: ModelCatalog | None = None,
) -> FastAPI:
    """Build the gateway app.

    `settings` default to the environment (`SWITCHYARD_*`); `backend_factory` to Triton;
    `config`, when given, is used instead of loading `settings.config` (the CLI has loaded it);
    `capacity` to polling each pool's server metrics (tests pass a fixed one); `catalog` to
    the config's models (the edge benchmark passes one that tokenizes on the event loop).
    """
    settings = settings if settings is not None else GatewaySettings()
    make_backend = backend_factory if backend_factory is not None else triton_backend_factory

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = config if config is not None else load_config(settings.config)
        async with contextlib.AsyncExitStack() as stack:  # closed in reverse: the door first
            models = (
                catalog if catalog is not None else stack.enter_context(contextlib.closing(ModelCatalog.load(loaded)))
            )
            clients = await stack.enter_async_context(_redis_clients(loaded))  # closed after what writes
            backend = make_backend(loaded, settings, app.state.metrics)
            stack.push_async_callback(backend.close)
            registry = RequestRegistry(backend, app.state.metrics, cancel_grace_s=settings.cancel_grace_s)
            stack.push_async_callback(registry.close)  # its requests' ends still reach Redis
            keys = _install_keys(app, loaded, clients.commands)
            edge = install_edge(app, loaded, settings, keys)  # key, size and caps before any body is read
            source = (
                capacity if capacity is not None else await stack.enter_async_context(_polled_capacity(loaded, backend))
            )
            app.state.services = await stack.enter_async_context(
                _services(app, loaded, settings, models, backend, registry, clients, source)
            )
            open_console(app, loaded, clients.commands, keys, source)  # its reads: the same stores
            if settings.grpc_port is not None:  # closed first: its calls end before what they use
                await stack.enter_async_context(_grpc_door(loaded, settings, app, keys, edge.slots))
            if settings.freeze_heap:  # what start-up built lives as long as the worker: out of full GCs
                freeze_startup_heap()
            yield

    app = FastAPI(title="Switchyard gateway", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = GatewayMetrics(multiprocess_dir=settings.prometheus_multiproc_dir)
    install_error_handlers(app)
    install_openapi(app)  # the document's integer bounds as the integers the server keeps
    app.add_middleware(EdgeGuard)
    app.include_router(api_router)
    install_console(app)  # /console: pages over a session cookie (gateway/console/)
    return app


@dataclass(frozen=True, slots=True)
class RedisClients:
    """A worker's two bounded pools (config/redis_client.py): `commands` for short commands,
    `waiting` for the reads that wait (the request bus's subscription, followers' XREADs), so
    waiting never holds a connection a request's claim or lease needs."""

    commands: redis.Redis
    waiting: redis.Redis


@contextlib.asynccontextmanager
async def _redis_clients(config: SwitchyardConfig) -> AsyncIterator[RedisClients]:
    """Short timeouts and no retries: a Redis outage is a quick 503, not a hung request."""
    limits = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0, "retry_on_timeout": False}
    commands = gateway_redis_client(config, "gateway", **limits)
    waiting = gateway_redis_client(config, "gateway", max_connections=WAITING_CONNECTIONS, **limits)
    try:
        yield RedisClients(commands, waiting)
    finally:
        await commands.aclose()
        await waiting.aclose()


def _install_keys(app: FastAPI, config: SwitchyardConfig, client: redis.Redis) -> KeyCache:
    """The worker's one key cache, every door's (a key looked up in Redis at most once per
    `gateway.key_cache_s`)."""
    key_store = KeyStore(client, config.teams, load_admin_key_hash(config.var_path))
    keys = KeyCache(key_store, config.gateway.key_cache_s)
    install_auth(app, keys)
    return keys


@contextlib.asynccontextmanager
async def _services(
    app: FastAPI,
    config: SwitchyardConfig,
    settings: GatewaySettings,
    models: ModelCatalog,
    backend: GenerationBackend,
    registry: RequestRegistry,
    clients: RedisClients,
    capacity: CapacitySource,
) -> AsyncIterator[Services]:
    """What the routes and the gRPC door run on: generation (claims, admission, metering, the
    request bus), batch intake and the server registry."""
    # Every script call of this worker's requests (claims, leases, final records, usage)
    # coalesced into pipelines: a few connections whatever is in flight, and in sentinel
    # mode one WAIT for a replica's hold of a whole batch.
    scripts = BatchedScripts(ReplicaAcks.from_settings(config.redis))
    metering = install_metering(app, UsageMeter(clients.commands, scripts))
    bus = RequestBus(clients.waiting)
    admission = Admission(config, clients.commands, capacity, scripts=scripts)
    idempotency = IdempotencyStore(
        clients.commands, ttl_s=config.gateway.idempotency_ttl_s, acks=scripts, blocking=clients.waiting
    )
    latency_log = None if settings.latency_log is None else LatencyLog(settings.latency_log)
    generation = GenerationService(
        config, models, registry, idempotency=idempotency, admission=admission, metering=metering, bus=bus,
        metrics=app.state.metrics, latency_log=latency_log,
        predictor=backend if isinstance(backend, TtftPredictor) else None,
    )  # fmt: skip
    await bus.start(generation.on_bus_message)
    templates = ChatTemplates(config)
    app.state.chat_templates = templates  # the chat route's, shared with batch validation
    intake = BatchIntake(config, clients.commands, LocalBlobStore(config.blob_path), models, templates)
    servers = ServerRegistry(clients.commands, config.fleet.dead_after_s)
    try:
        yield Services(config, models, backend, registry, generation, admission, intake, servers, clients.commands)
    finally:
        del app.state.services
        await bus.close()


@contextlib.asynccontextmanager
async def _grpc_door(
    config: SwitchyardConfig, settings: GatewaySettings, app: FastAPI, keys: KeyCache, slots: KeySlots
) -> AsyncIterator[None]:
    """The gRPC front door on this worker's services."""
    from gateway.grpc_door.server import serving_door  # tritonclient is heavy: only here

    assert settings.grpc_port is not None
    async with serving_door(
        config, settings.host or config.gateway.host, settings.grpc_port,
        services=app.state.services, keys=keys, slots=slots, metrics=app.state.metrics, workers=settings.workers,
    ):  # fmt: skip
        yield
