"""RedisServer: a real redis-server starts, answers, keeps data append-only, and stops; it
admits only the components' ACL users, each with its own password, and only to what it needs."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from config.internal_secrets import REDIS_COMPONENTS, RedisComponent
from config.settings import SwitchyardConfig
from server_host.ports import free_ports
from stack.redis_server import RedisServer


def test_data_survives_a_restart(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    server = RedisServer(port, tmp_path / "data", tmp_path / "redis.log", secrets_dir=tmp_path / "secrets")
    server.start()
    try:
        redis.Redis.from_url(server.url).set("accepted", "1")
    finally:
        server.stop()
    assert not server.ping()
    again = RedisServer(port, tmp_path / "data", tmp_path / "redis.log", secrets_dir=tmp_path / "secrets")
    again.start()
    try:
        assert redis.Redis.from_url(again.url).get("accepted") == b"1"
    finally:
        again.stop()


def test_redis_url_fixture_starts_empty(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    client.set("k", "v")


def _config(server: RedisServer, tmp_path: Path) -> SwitchyardConfig:
    return SwitchyardConfig.model_validate(
        {
            "root": tmp_path,
            "models": {"m": {"weights_uri": "m", "max_context_tokens": 64}},
            "pools": {"m": {"model_id": "m", "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
            "redis": {"host": server.host, "port": server.port},
            "secrets_dir": str(server.secrets_dir),
        }
    )


def test_an_unauthenticated_client_is_refused(redis_server: RedisServer) -> None:
    with redis.Redis(host=redis_server.host, port=redis_server.port) as anonymous:
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("sy:keys", "minted")
        with pytest.raises(redis.AuthenticationError):
            anonymous.hgetall("sy:keys")


def test_a_wrong_password_and_the_default_user_are_refused(redis_server: RedisServer) -> None:
    for username, password in (("gateway", "guess"), ("default", ""), ("admin", "admin")):
        with (
            redis.Redis(host=redis_server.host, port=redis_server.port, username=username, password=password) as client,
            pytest.raises(redis.AuthenticationError),
        ):
            client.ping()


def test_each_component_logs_in_as_its_own_user(redis_server: RedisServer, redis_url: str, tmp_path: Path) -> None:
    config = _config(redis_server, tmp_path)
    passwords = {c: redis_server.secrets.redis_passwords[c] for c in REDIS_COMPONENTS}
    assert len(set(passwords.values())) == len(REDIS_COMPONENTS)  # distinct
    for component in REDIS_COMPONENTS:
        with redis.Redis.from_url(config.redis_url(component)) as client:
            assert client.acl_whoami() == component
            client.set(f"sy:test:{component}", "1")
            assert client.get(f"sy:test:{component}") == b"1"


@pytest.mark.parametrize("component", ["gateway", "dispatcher", "fleet"])
def test_a_components_user_reaches_only_switchyards_keys_and_no_dangerous_command(
    component: RedisComponent, redis_server: RedisServer, redis_url: str, tmp_path: Path
) -> None:
    """What a stolen component password gets: not the whole database, not the server."""
    with redis.Redis.from_url(_config(redis_server, tmp_path).redis_url(component)) as client:
        for refused in (
            lambda: client.flushall(),
            lambda: client.config_set("appendonly", "no"),
            lambda: client.acl_list(),
            lambda: client.keys("*"),
            lambda: client.set("other-app:key", "1"),
            lambda: client.publish("other-channel", "x"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                refused()
        client.publish("sy:requests", "x")  # its own channels
    with redis.Redis.from_url(redis_url) as admin:
        admin.set("other-app:key", "1")  # the operator's user may do anything


def test_secrets_are_made_once_private_and_kept(redis_server: RedisServer, tmp_path: Path) -> None:
    secrets_dir = redis_server.secrets_dir
    assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    for path in secrets_dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    before = {p.name: p.read_text() for p in secrets_dir.iterdir()}
    again = RedisServer(redis_server.port, tmp_path / "data", tmp_path / "log", secrets_dir=secrets_dir)
    assert again.secrets.redis_passwords == redis_server.secrets.redis_passwords
    assert {p.name: p.read_text() for p in secrets_dir.iterdir()} == before
    assert "user default off" in before["redis-users.acl"]
    assert not any(password in before["redis-users.acl"] for password in again.secrets.redis_passwords.values())


def test_transactions_and_scripts_survive_a_restart(tmp_path: Path) -> None:
    """Redis 7.0 replays its append-only file as `default`: with a `default` that may run
    nothing, every MULTI/EXEC and Lua script's writes were dropped on restart (the chaos run's
    restart-redis fault found it: leases, claims and batch marks gone)."""
    (port,) = free_ports(1)

    def started() -> RedisServer:
        server = RedisServer(port, tmp_path / "data", tmp_path / "redis.log", secrets_dir=tmp_path / "secrets")
        server.start()
        return server

    server = started()
    try:
        client = redis.Redis.from_url(server.url)
        client.eval("redis.call('SET', KEYS[1], 'scripted'); return 1", 1, "sy:script")
        with client.pipeline(transaction=True) as pipe:
            pipe.set("sy:multi", "exec").incr("sy:count")
            pipe.execute()
    finally:
        server.stop()
    again = started()
    try:
        client = redis.Redis.from_url(again.url)
        assert client.mget("sy:script", "sy:multi", "sy:count") == [b"scripted", b"exec", b"1"]
    finally:
        again.stop()
    with redis.Redis(host=again.host, port=port) as anonymous:  # `default` is still no way in
        again.start()
        try:
            with pytest.raises(redis.AuthenticationError):
                anonymous.get("sy:script")
            as_default = redis.Redis(host=again.host, port=port, username="default", password="x")
            with as_default, pytest.raises(redis.AuthenticationError):
                as_default.get("sy:script")
        finally:
            again.stop()
