"""`switchyard keys ...` and `switchyard usage` against a real redis-server, through `main()`
with a temporary switchyard.yaml that points at it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import redis.asyncio

from config.redis_client import sync_redis_client
from config.settings import load_config
from quota.key_files import read_key_file
from quota.keys import KEYS_HASH, SyncKeyStore, hash_key
from quota.usage import UsageMeter, UsageRecord
from server_host.ports import free_ports
from stack.local_stack import Stack, ready_message
from stack.redis_server import RedisServer
from switchyard.cli import main


@pytest.fixture
def config_path(tmp_path: Path, redis_url: str, redis_server: RedisServer) -> Path:
    path = tmp_path / "switchyard.yaml"
    path.write_text(
        f"""
models:
  small: {{weights_uri: models/small, max_context_tokens: 64}}
pools:
  small: {{model_id: small, ports: {{http: 9101, grpc: 9102, metrics: 9103}}}}
redis: {{host: {redis_server.host}, port: {redis_server.port}}}
secrets_dir: {redis_server.secrets_dir}
teams:
  dev: {{}}
  alpha: {{weight: 2, models: [small]}}
"""
    )
    return path


def store(path: Path) -> SyncKeyStore:
    config = load_config(path)
    return SyncKeyStore(sync_redis_client(config, "admin"), config.teams)


def test_keys_create_prints_the_key_once_and_it_resolves(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "keys", "create", "alpha"]) == 0
    out, err = capsys.readouterr()
    key = out.strip()
    assert out == key + "\n" and key.startswith("sy-")  # stdout is the key alone: $(switchyard keys create ...)
    assert "shown once" in err
    assert store(config_path).resolve(key) == "alpha"

    assert main(["--config", str(config_path), "keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert key not in listing
    assert hash_key(key)[:12] in listing and "alpha" in listing


def test_keys_create_refuses_an_unknown_team(
    config_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(config_path), "keys", "create", "gamma"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "unknown team 'gamma'" in err and "alpha, dev" in err
    assert redis.Redis.from_url(redis_url).exists(KEYS_HASH) == 0


def test_keys_revoke_by_hash_prefix(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = store(config_path).create("dev")
    assert main(["--config", str(config_path), "keys", "revoke", hash_key(key)[:10]]) == 0
    assert "revoked" in capsys.readouterr().out
    assert store(config_path).resolve(key) is None
    assert main(["--config", str(config_path), "keys", "revoke", "ffff"]) == 2


def test_usage_prints_a_table(config_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def record() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        rec = UsageRecord(
            team_id="alpha", model_id="small", request_class="bulk", prompt_tokens=120, completion_tokens=8
        )
        await UsageMeter(client).record(rec, datetime.now(UTC))
        await client.aclose()

    asyncio.run(record())
    assert main(["--config", str(config_path), "usage", "--since", "2h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == [
        "team",
        "model",
        "tier",
        "requests",
        "prompt",
        "cached",
        "completion",
        "cancelled",
        "kv",
        "token-s",
    ]
    assert lines[3].split() == ["alpha", "small", "batch", "1", "120", "0", "8", "0", "0.0"]
    assert lines[4].split() == ["total", "1", "120", "0", "8", "0", "0.0"]
    assert main(["--config", str(config_path), "usage", "--since", "soon"]) == 2


def test_commands_say_when_redis_is_not_running(
    tmp_path: Path, redis_secrets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = free_ports(1)
    path = tmp_path / "switchyard.yaml"
    path.write_text(
        "models: {small: {weights_uri: m, max_context_tokens: 64}}\n"
        "pools: {small: {model_id: small, ports: {http: 9101, grpc: 9102, metrics: 9103}}}\n"
        f"redis: {{port: {port}}}\nsecrets_dir: {redis_secrets}\nteams: {{dev: {{}}}}\n"
    )
    assert main(["--config", str(path), "keys", "create", "dev"]) == 1
    assert "cannot reach redis" in capsys.readouterr().err


def test_make_up_keeps_a_key_per_team_and_prints_the_curl_with_the_first(config_path: Path, tmp_path: Path) -> None:
    config = load_config(config_path).model_copy(update={"var_dir": str(tmp_path / "var")})
    stack = Stack(config, with_redis=False)  # the fixture's Redis stands in for the stack's own
    stack.ensure_keys()
    keys_dir = tmp_path / "var" / "keys"
    assert stack.team_key_paths == {"dev": keys_dir / "dev-api-key", "alpha": keys_dir / "alpha-api-key"}
    keys = {team: read_key_file(path) for team, path in stack.team_key_paths.items()}
    assert all(key is not None and store(config_path).resolve(key) == team for team, key in keys.items())
    assert stack.default_key_path == keys_dir / "dev-api-key"  # the first team's
    assert read_key_file(tmp_path / "var" / "admin-api-key") is not None

    again = Stack(config, with_redis=False)
    again.ensure_keys()
    assert {team: read_key_file(path) for team, path in again.team_key_paths.items()} == keys
    message = ready_message(again, "small")
    assert f'-H "Authorization: Bearer $(cat {keys_dir / "dev-api-key"})"' in message
    assert f"alpha        {keys_dir / 'alpha-api-key'}" in message
    assert "Ctrl-C stops everything" in message
    assert f"Console: {again.gateway_url}/console" in message  # where people sign in (docs/console.md)
