"""API keys against a real redis-server: only hashes are stored, keys resolve to their team."""

from __future__ import annotations

import hashlib
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

from config.environment import SwitchyardEnvironment
from config.settings import TeamSpec
from quota.key_files import (
    ADMIN_KEY_ENV,
    admin_key_path,
    default_key_path,
    ensure_admin_key,
    ensure_team_key,
    ensure_team_keys,
    load_admin_key_hash,
    read_key_file,
)
from quota.keys import KEYS_HASH, KeyStore, SyncKeyStore, UnknownTeam, generate_key, hash_key

STATIC_KEY = "sy-static-key-from-the-yaml-file"
TEAMS = {
    "alpha": TeamSpec(weight=2),
    "beta": TeamSpec(models=["small"], api_key_hashes=[hash_key(STATIC_KEY)]),
}


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def test_generated_keys_are_random_and_hashed_with_sha256() -> None:
    keys = {generate_key() for _ in range(100)}
    assert len(keys) == 100
    key = keys.pop()
    assert key.startswith("sy-") and len(key) == 3 + 43
    assert hash_key(key) == hashlib.sha256(key.encode()).hexdigest()


async def test_create_stores_only_the_hash_and_resolves_to_the_team(
    client: redis.asyncio.Redis, redis_url: str
) -> None:
    store = KeyStore(client, TEAMS)
    key = await store.create("alpha")
    assert await client.hgetall(KEYS_HASH) == {hash_key(key).encode(): b"alpha"}
    dump = redis.Redis.from_url(redis_url, decode_responses=True)
    for name in dump.keys("*"):
        assert key not in name
        assert all(key not in str(value) for value in dump.hgetall(name).values())
    assert await store.resolve(key) == "alpha"
    assert await store.resolve(key + "x") is None
    assert await store.resolve("") is None


async def test_revoked_key_no_longer_resolves(client: redis.asyncio.Redis) -> None:
    store = KeyStore(client, TEAMS)
    kept, revoked = await store.create("alpha"), await store.create("alpha")
    assert await store.revoke(hash_key(revoked)) is True
    assert await store.revoke(hash_key(revoked)) is False
    assert await store.resolve(revoked) is None
    assert await store.resolve(kept) == "alpha"


async def test_unknown_team_gets_no_key(client: redis.asyncio.Redis) -> None:
    with pytest.raises(UnknownTeam, match=r"'gamma'.*alpha, beta"):
        await KeyStore(client, TEAMS).create("gamma")
    assert await client.exists(KEYS_HASH) == 0


async def test_static_hashes_resolve_without_redis_and_list_shows_both(client: redis.asyncio.Redis) -> None:
    store = KeyStore(client, TEAMS)
    assert await store.resolve(STATIC_KEY) == "beta"
    key = await store.create("alpha")
    entries = await store.list()
    assert [(e.team_id, e.key_hash, e.source) for e in entries] == [
        ("alpha", hash_key(key), "redis"),
        ("beta", hash_key(STATIC_KEY), "config"),
    ]


async def test_key_of_a_team_removed_from_the_config_does_not_resolve(client: redis.asyncio.Redis) -> None:
    key = await KeyStore(client, TEAMS).create("alpha")
    assert await KeyStore(client, {"beta": TEAMS["beta"]}).resolve(key) is None


async def test_sync_and_async_stores_share_keys(client: redis.asyncio.Redis, redis_url: str) -> None:
    sync_store = SyncKeyStore(redis.Redis.from_url(redis_url), TEAMS)
    key = sync_store.create("beta")
    assert await KeyStore(client, TEAMS).resolve(key) == "beta"
    assert sync_store.resolve(key) == "beta"
    assert sync_store.revoke(hash_key(key)) is True
    assert sync_store.resolve(key) is None
    with pytest.raises(UnknownTeam):
        sync_store.create("nobody")


def test_admin_key_file_is_private_and_stable(tmp_path: Path) -> None:
    path = ensure_admin_key(tmp_path)
    assert path == admin_key_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = read_key_file(path)
    assert key is not None and key.startswith("sy-")
    assert read_key_file(ensure_admin_key(tmp_path)) == key
    assert load_admin_key_hash(tmp_path, SwitchyardEnvironment(admin_key=None)) == hash_key(key)


def test_admin_key_from_the_environment_wins(tmp_path: Path) -> None:
    assert load_admin_key_hash(tmp_path, SwitchyardEnvironment(admin_key=None)) is None
    ensure_admin_key(tmp_path)
    admin_hash = load_admin_key_hash(tmp_path, SwitchyardEnvironment(admin_key="sy-from-env"))
    store = SyncKeyStore(redis.Redis(), TEAMS, admin_hash)  # is_admin needs no connection
    assert store.is_admin("sy-from-env")
    assert not store.is_admin(read_key_file(admin_key_path(tmp_path)) or "")
    assert not SyncKeyStore(redis.Redis(), TEAMS).is_admin("sy-from-env")


def test_the_gateway_reads_the_admin_key_from_its_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ensure_admin_key(tmp_path)
    monkeypatch.setenv(ADMIN_KEY_ENV, "  sy-from-env\n")
    assert load_admin_key_hash(tmp_path) == hash_key("sy-from-env")
    monkeypatch.setenv(ADMIN_KEY_ENV, " ")  # blank: unset, the file's key
    assert load_admin_key_hash(tmp_path) == hash_key(read_key_file(admin_key_path(tmp_path)) or "")


def test_a_team_key_is_reused_while_it_resolves_and_replaced_after(redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    store = SyncKeyStore(client, {"dev": TeamSpec()})
    path = ensure_team_key(store, tmp_path / "dev-api-key", "dev")
    first = read_key_file(path)
    assert first is not None and store.resolve(first) == "dev"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_key_file(ensure_team_key(store, path, "dev")) == first
    assert client.hlen(KEYS_HASH) == 1

    client.flushall()  # a fresh Redis: the file's key no longer resolves
    second = read_key_file(ensure_team_key(store, path, "dev"))
    assert second is not None and second != first
    assert store.resolve(second) == "dev"


def test_each_team_gets_its_own_key_file_and_the_first_is_the_default(redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    teams = {"chat": TeamSpec(weight=3), "search": TeamSpec(weight=2), "analytics": TeamSpec()}
    store = SyncKeyStore(client, teams)
    paths = ensure_team_keys(store, tmp_path, teams)
    assert paths == {team: tmp_path / "keys" / f"{team}-api-key" for team in teams}
    assert {team: store.resolve(read_key_file(path) or "") for team, path in paths.items()} == {t: t for t in teams}
    assert default_key_path(tmp_path, teams) == paths["chat"]
    assert default_key_path(tmp_path, {}) is None
