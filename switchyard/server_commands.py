"""`switchyard servers` and `switchyard drain`: the fleet in the registry of switchyard.yaml's Redis.

switchyard servers [--pool P]   id, pool, state, pid, ports, KV in use, running and waiting
                                requests (the registry, plus a scrape of each server's metrics);
                                then, per pool the autoscaler runs, its target beside the
                                servers ready, starting and draining, and the target's reasons
switchyard drain SERVER         mark it DRAINING: its supervisor SIGTERMs it, it finishes its
                                requests and stops; it is not restarted
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import httpx
import redis
import redis.asyncio

from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from contracts.engine_metrics import EngineHealth, parse_engine_health
from fleet_state.pool_targets import PoolTarget, PoolTargetStore
from fleet_state.registry import ServerInfo, ServerRegistry
from fleet_state.server_state import ServerState
from report.text_table import text_table

_HEAD = ("server", "pool", "state", "pid", "http", "grpc", "metrics", "kv used", "running", "waiting", "seen")


def add_server_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`servers` and `drain`, run by the functions of the same names."""
    listing = sub.add_parser("servers", help="list the registered servers with their load")
    listing.add_argument("--pool", default=None)
    listing.set_defaults(func=servers)
    parser = sub.add_parser("drain", help="drain a server: no new requests, finish the running ones, stop")
    parser.add_argument("server_id", metavar="SERVER")
    parser.set_defaults(func=drain)


def servers(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    pool_ids = [args.pool] if args.pool else list(config.pools)
    try:
        found = asyncio.run(_servers_with_health(config, args.pool))
        targets = asyncio.run(_targets(config, pool_ids))
    except (OSError, redis.RedisError) as exc:
        return _unreachable(config, exc)
    if not found:
        print("no servers registered" + (f" in pool {args.pool!r}" if args.pool else ""), file=sys.stderr)
    else:
        now = time.time()
        print(text_table(_HEAD, [server_row(info, health, now) for info, health in found]))
    if targets:
        infos = [info for info, _ in found]
        print()
        print(text_table(_TARGET_HEAD, [target_row(t, infos) for t in targets.values()]))
    return 0


_TARGET_HEAD = ("pool", "target", "ready", "starting", "draining", "why (autoscaler)")


def target_row(target: PoolTarget, infos: list[ServerInfo]) -> list[str]:
    """A pool's autoscaler target beside what the registry shows it running now."""
    states = [info.state for info in infos if info.pool_id == target.pool_id]
    return [
        target.pool_id,
        str(target.target),
        str(states.count(ServerState.READY)),
        str(states.count(ServerState.STARTING)),
        str(states.count(ServerState.DRAINING)),
        "; ".join(target.reasons) or "-",
    ]


async def _targets(config: SwitchyardConfig, pool_ids: list[str]) -> dict[str, PoolTarget]:
    client = redis_client(config, "admin")
    try:
        return await PoolTargetStore(client).read(pool_ids)
    finally:
        await client.aclose()


def drain(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    async def request() -> bool:
        client = redis_client(config, "admin")
        try:
            return await ServerRegistry(client, config.fleet.dead_after_s).request_drain(args.server_id)
        finally:
            await client.aclose()

    try:
        marked = asyncio.run(request())
    except (OSError, redis.RedisError) as exc:
        return _unreachable(config, exc)
    if not marked:
        print(f"no server {args.server_id!r} is registered (`switchyard servers` lists them)", file=sys.stderr)
        return 2
    print(
        f"{args.server_id}: draining. It takes no new requests, finishes the running ones, then stops "
        "and leaves `switchyard servers`."
    )
    return 0


def server_row(info: ServerInfo, health: EngineHealth | None, now: float) -> list[str]:
    """One line of `switchyard servers`; load columns are "-" when its metrics are unreadable."""
    used = health.used_fraction if health is not None else None
    return [
        info.server_id,
        info.pool_id,
        info.state.value,
        str(info.pid) if info.pid is not None else "-",
        str(info.http_port),
        str(info.grpc_port),
        str(info.metrics_port),
        f"{used:.0%}" if used is not None else "-",
        str(health.active) if health is not None else "-",
        str(health.waiting) if health is not None else "-",
        f"{max(0.0, now - info.heartbeat_at):.1f}s ago",
    ]


async def _servers_with_health(
    config: SwitchyardConfig, pool_id: str | None
) -> list[tuple[ServerInfo, EngineHealth | None]]:
    client = redis_client(config, "admin")
    try:
        infos = await ServerRegistry(client, config.fleet.dead_after_s).servers(pool_id)
    finally:
        await client.aclose()
    async with httpx.AsyncClient() as http:
        healths = await asyncio.gather(*(_scrape(http, info.metrics_url) for info in infos))
    return list(zip(infos, healths, strict=True))


async def _scrape(http: httpx.AsyncClient, url: str) -> EngineHealth | None:
    try:
        response = await http.get(url, timeout=2.0)
        response.raise_for_status()
        return parse_engine_health(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def _unreachable(config: SwitchyardConfig, exc: Exception) -> int:
    print(f"cannot reach redis at {config.redis.address} ({exc}); is the platform up (`make up`)?", file=sys.stderr)
    return 1
