"""The live autoscaler put together: Redis, the servers' and gateway's metrics, a policy and a
profile per pool, an actuator; and `serve_autoscaler`, which runs it until told to stop.

What one server of a live pool can carry (`pool_capacity`), from its engine config:

    requests      = min(max_num_seqs, kv_capacity_tokens / avg_request_tokens)
    tokens_per_s  = requests × avg_request_tokens / avg_request_s
    avg_request_s = how long an interactive request holds its seat
    startup_s     = autoscaler.startup_s

`avg_request_tokens` (prompt + reply) and `avg_request_s` default to the brief's averages (2,300
tokens, ~10 s); measure yours and pass them (`switchyard autoscaler --avg-request-tokens
--avg-request-s`): the gateway's `switchyard_gateway_request_latency_seconds` sum / count is
the mean duration, `switchyard usage` the tokens. tokens_per_s follows from them: a full
server turns its seats over once per avg_request_s.

Each pool's `LoadProfile` starts from the rates stored in Redis (`autoscaler/rate_history.py`), so
a restarted autoscaler still knows what the morning looks like.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
import redis.asyncio
from prometheus_client import start_http_server

from autoscaler.actuators import Actuator
from autoscaler.bulk_backlog import BulkBacklog
from autoscaler.live_signals import LiveSignals
from autoscaler.load_profile import DAY_S, LoadProfile
from autoscaler.policies import Autoscaler
from autoscaler.rate_history import RateHistory
from autoscaler.scaling_loop import AutoscalerService, PoolScaler
from autoscaler.signals import ServerCapacity
from autoscaler.usage_rates import EndedRequests
from bulk.batch_store import BatchStore
from config.redis_client import redis_client
from config.settings import AutoscalerSpec, PoolSpec, SwitchyardConfig
from fleet_state.pool_targets import PoolTargetStore
from fleet_state.registry import ServerRegistry
from quota.usage import UsageMeter

logger = logging.getLogger(__name__)

# A pass every few seconds reads the registry, usage and batches: a few connections suffice.
AUTOSCALER_CONNECTIONS = 8


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """What the configuration does not say about a live pool (module docstring)."""

    # None: the `autoscaler:` section's figures.
    avg_request_tokens: int | None = None
    avg_request_s: float | None = None
    bulk_tokens_per_entry: int | None = None
    profile_bin_s: float | None = None  # LoadProfile's time slot (None: from startup_s, `new_profile`)
    profile_level_tau_s: float | None = None  # how fast its level follows the rate (None: from interval_s)
    gateway_metrics_urls: tuple[str, ...] = ()  # TTFT from these gateways' /metrics


def pool_capacity(pool: PoolSpec, spec: AutoscalerSpec, options: LiveOptions) -> ServerCapacity:
    """One server of `pool`, from its engine config and the request averages (module docstring)."""
    tokens = options.avg_request_tokens or spec.avg_request_tokens
    seconds = options.avg_request_s or spec.avg_request_s
    if tokens <= 0 or seconds <= 0:
        raise ValueError(f"request averages must be positive, got {tokens} tokens, {seconds} s")
    engine = pool.engine
    requests = min(float(engine.max_num_seqs), engine.kv_capacity_tokens / tokens)
    return ServerCapacity(
        requests=requests,
        tokens_per_s=requests * tokens / seconds,
        avg_request_s=seconds,
        startup_s=spec.startup_s,
    )


def new_profile(spec: AutoscalerSpec, options: LiveOptions) -> LoadProfile:
    """An empty profile whose time slot is no coarser than a start-up (the look-ahead must see a
    rise within one start-up: 15-minute slots would average a 5-minute ramp away), at most 15
    minutes, and a divisor of a day; its level follows the rate over four intervals (one
    minute at the default 15 s)."""
    bin_s = options.profile_bin_s
    if bin_s is None:
        bin_s = next(d for d in range(int(min(max(spec.startup_s, 1.0), 900.0)), 0, -1) if DAY_S % d == 0)
    tau_s = options.profile_level_tau_s
    return LoadProfile(bin_s=bin_s, level_tau_s=4 * spec.interval_s if tau_s is None else tau_s)


ProfileFactory = Callable[[str], LoadProfile]


async def build_service(
    config: SwitchyardConfig,
    client: redis.asyncio.Redis,
    http: httpx.AsyncClient,
    actuator: Actuator,
    pool_ids: Sequence[str],
    options: LiveOptions | None = None,
    *,
    capacities: Mapping[str, ServerCapacity] | None = None,
    profile_factory: ProfileFactory | None = None,
) -> AutoscalerService:
    """An `AutoscalerService` for `pool_ids`, each pool's profile filled from the history."""
    spec = config.autoscaler
    options = options if options is not None else LiveOptions()
    unknown = [p for p in pool_ids if p not in config.pools]
    if unknown:
        raise ValueError(f"unknown pools {unknown}; switchyard.yaml has {sorted(config.pools)}")
    history = RateHistory(client)
    now = time.time()
    scalers: dict[str, PoolScaler] = {}
    for pool_id in pool_ids:
        pool = config.pools[pool_id]
        if profile_factory is not None:
            profile = profile_factory(pool_id)
        else:
            profile = new_profile(spec, options)
        past = await history.load(pool_id, now)
        for t, rate in past:
            profile.record(t, rate)
        capacity = capacities[pool_id] if capacities is not None else pool_capacity(pool, spec, options)
        policy = Autoscaler(spec, capacity, min_copies=pool.min_copies, max_copies=pool.copies_limit, profile=profile)
        scalers[pool_id] = PoolScaler(policy, profile)
        logger.info("pool %s: %s; %d stored rates in its profile", pool_id, capacity, len(past))
    pools_by_model = {
        model_id: [p for p in config.pools_for_model(model_id) if p in pool_ids] for model_id in config.models
    }
    signals = LiveSignals(
        config,
        pool_ids,
        ServerRegistry(client, config.fleet.dead_after_s),
        EndedRequests(UsageMeter(client)),
        BulkBacklog(
            BatchStore(client),
            pools_by_model,
            options.bulk_tokens_per_entry or config.autoscaler.bulk_tokens_per_entry,
        ),
        http,
        options.gateway_metrics_urls,
    )
    return AutoscalerService(
        scalers,
        signals,
        actuator,
        interval_s=spec.interval_s,
        targets=PoolTargetStore(client, ttl_s=max(30.0, 4 * spec.interval_s)),
        history=history,
    )


async def serve_autoscaler(
    config: SwitchyardConfig,
    actuator: Actuator,
    pool_ids: Sequence[str],
    stop: asyncio.Event,
    options: LiveOptions | None = None,
    *,
    capacities: Mapping[str, ServerCapacity] | None = None,
    profile_factory: ProfileFactory | None = None,
) -> None:
    """Run the autoscaler until `stop` is set, its metrics on `autoscaler.metrics_port` (0: none)."""
    client = redis_client(config, "fleet", socket_timeout=5.0, max_connections=AUTOSCALER_CONNECTIONS)
    metrics_server = None
    try:
        async with httpx.AsyncClient() as http:
            service = await build_service(
                config, client, http, actuator, pool_ids, options,
                capacities=capacities, profile_factory=profile_factory,
            )  # fmt: skip
            port = config.autoscaler.metrics_port
            if port:
                metrics_server, _ = start_http_server(port, addr=config.gateway.host, registry=service.metrics.registry)
            every = config.autoscaler.interval_s
            logger.info("autoscaler (%s) on pools %s, every %.0f s", actuator.name, ", ".join(pool_ids), every)
            await service.run(stop)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        await client.aclose()
