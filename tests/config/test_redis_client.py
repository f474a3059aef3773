"""`config.redis_client`: one address gives a plain client; sentinels give a client that asks
them for the primary, logged in to the primary and to the sentinels as the component's user,
with the site's own options kept."""

from __future__ import annotations

from pathlib import Path

import redis
import redis.asyncio

from config.redis_client import redis_client, sync_redis_client
from config.settings import SwitchyardConfig

BASE = {
    "models": {"m": {"weights_uri": "m", "max_context_tokens": 64}},
    "pools": {"m": {"model_id": "m", "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
}
SENTINELS = [{"host": "s0", "port": 26001}, {"host": "s1", "port": 26002}]


def _config(root: Path, **redis_settings: object) -> SwitchyardConfig:
    folder = root / "var" / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "redis-gateway").write_text("gw-secret\n")
    return SwitchyardConfig.model_validate({"root": root, **BASE, "redis": {"port": 7000, **redis_settings}})


async def test_one_address_is_a_plain_client_with_the_sites_options(tmp_path: Path) -> None:
    client = redis_client(_config(tmp_path), "gateway", socket_timeout=2.0)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["port"], kwargs["socket_timeout"]) == (
        "gateway",
        "gw-secret",
        7000,
        2.0,
    )
    assert not isinstance(client.connection_pool, redis.asyncio.sentinel.SentinelConnectionPool)
    await client.aclose()


async def test_sentinels_give_a_client_of_the_primary_found_through_them(tmp_path: Path) -> None:
    config = _config(tmp_path, sentinels=SENTINELS, master_name="sy", db=2)
    client = redis_client(config, "gateway", socket_timeout=2.0, decode_responses=True)
    pool = client.connection_pool
    assert isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool)
    assert pool.service_name == "sy" and pool.is_master
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"], kwargs["decode_responses"]) == (
        "gateway",
        "gw-secret",
        2,
        True,
    )
    sentinels = pool.sentinel_manager.sentinels
    assert [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"]) for s in sentinels
    ] == [
        ("s0", 26001),
        ("s1", 26002),
    ]
    sentinel_login = sentinels[0].connection_pool.connection_kwargs
    assert (sentinel_login["username"], sentinel_login["password"], sentinel_login["socket_timeout"]) == (
        "gateway",
        "gw-secret",
        2.0,
    )
    await client.aclose()


def test_the_blocking_client_follows_the_same_settings(tmp_path: Path) -> None:
    client = sync_redis_client(_config(tmp_path, sentinels=SENTINELS), "gateway")
    assert isinstance(client.connection_pool, redis.sentinel.SentinelConnectionPool)
    assert client.connection_pool.connection_kwargs["username"] == "gateway"
    client.close()


def test_the_address_for_messages_names_the_sentinels_and_no_password(tmp_path: Path) -> None:
    config = _config(tmp_path, sentinels=SENTINELS, master_name="sy")
    assert config.redis.address == "sentinel://s0:26001,s1:26002/sy/0"
    assert "gw-secret" not in config.redis.address
