"""The config of a stack a measurement starts for itself (a benchmark, the chaos and partition
runs): only the pools and teams it needs, on ports free at the time, so it runs beside `make up`
and beside another measurement, with its data under `var/bench/` (a run may move it).

    measured_config(base, pools, teams)   pools -> (model, engine), teams -> weight
    with_copies(config, pool_id, copies)  one pool run as several servers, their ports clear

Here rather than in `bench/` because the benchmarks and the fault harness both build such
stacks and neither imports the other's package downward (`faults` sits below `bench`).
"""

from __future__ import annotations

from config.settings import COPY_PORT_STRIDE, EngineSpec, PoolSpec, Ports, SwitchyardConfig, TeamSpec
from server_host.ports import free_ports, port_free


def measured_config(
    base: SwitchyardConfig, pools: dict[str, tuple[str, EngineSpec]], teams: dict[str, float]
) -> SwitchyardConfig:
    """`base` with only the given pools (pool_id -> (model_id, engine)) and teams (id ->
    weight), every server and Redis on free ports.

    Each bench pool gets its own model id alias so the gateway can address it by name: the
    alias shares the base model's weights. It streams as `base`'s pool of the same model does
    (`stream_pacing`), so a benchmark measures the pacing `make up` runs."""
    models = {}
    bench_pools = {}
    for pool_id, (model_id, engine) in pools.items():
        models[pool_id] = base.models[model_id].model_copy(
            update={"weights_uri": str(base.model_dir(model_id).resolve()), "architecture": None}
        )
        http, grpc, metrics = free_ports(3)
        ports = Ports(http=http, grpc=grpc, metrics=metrics)
        pool = PoolSpec(model_id=pool_id, target_copies=1, engine=engine, ports=ports)
        bench_pools[pool_id] = pool.model_copy(update=stream_pacing(base, model_id))
    gateway_port, redis_port, grpc_port = free_ports(3)
    return base.model_copy(
        update={
            "models": models,
            "pools": bench_pools,
            "gateway": base.gateway.model_copy(update={"port": gateway_port, "grpc_port": grpc_port}),
            "redis": base.redis.model_copy(update={"port": redis_port}),
            "teams": {team: TeamSpec(weight=weight) for team, weight in teams.items()},
            "var_dir": str(base.var_path / "bench"),
        }
    )


def stream_pacing(base: SwitchyardConfig, model_id: str) -> dict[str, object]:
    """How `base`'s first pool of `model_id` paces streamed responses; {} (the defaults) when
    no pool serves it."""
    pool = next((p for p in base.pools.values() if p.model_id == model_id), None)
    if pool is None:
        return {}
    return {
        "stream_interval_ms": pool.stream_interval_ms,
        "max_stream_responses_per_s": pool.max_stream_responses_per_s,
        "engine_in_process": pool.engine_in_process,
    }


def with_copies(config: SwitchyardConfig, pool_id: str, copies: int) -> SwitchyardConfig:
    """`config` running `copies` servers of `pool_id`, its ports moved where every copy's
    (base + 10·k, `PoolSpec.copy_ports`) was free a moment ago and clashes with no other port
    of `config`: `free_ports` alone says nothing of base + 10·k."""
    taken = {config.gateway.port, config.redis.port}
    for other_id, other in config.pools.items():
        if other_id != pool_id:
            taken.update(port for k in range(other.target_copies) for port in _ports_of(other.copy_ports(k)))
    for _ in range(100):
        http, grpc, metrics = free_ports(3)
        if max(http, grpc, metrics) + COPY_PORT_STRIDE * (copies - 1) > 65535:
            continue
        pool = config.pools[pool_id].model_copy(
            update={"target_copies": copies, "ports": Ports(http=http, grpc=grpc, metrics=metrics)}
        )
        wanted = [port for k in range(copies) for port in _ports_of(pool.copy_ports(k))]
        if (
            len(set(wanted)) == len(wanted)
            and not taken & set(wanted)
            and all(port_free("127.0.0.1", p) for p in wanted)
        ):
            return config.model_copy(update={"pools": {**config.pools, pool_id: pool}})
    raise RuntimeError(f"found no free ports for {copies} copies of pool {pool_id!r}")


def _ports_of(ports: Ports) -> tuple[int, int, int]:
    return ports.http, ports.grpc, ports.metrics
