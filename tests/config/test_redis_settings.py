"""`redis:` settings: each component's URL carries its own user, TLS becomes `rediss://` with
its files, and nothing meant for messages ever holds a password."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from redis.connection import SSLConnection, parse_url

from config.internal_secrets import MissingSecretError
from config.settings import SwitchyardConfig, dump_config, load_config

BASE = {
    "models": {"m": {"weights_uri": "m", "max_context_tokens": 64}},
    "pools": {"m": {"model_id": "m", "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
}


def _config(root: Path, **extra: object) -> SwitchyardConfig:
    return SwitchyardConfig.model_validate({"root": root, **BASE, **extra})


def _secrets(root: Path) -> Path:
    folder = root / "var" / "secrets"
    folder.mkdir(parents=True)
    for name, value in (("redis-gateway", "g+w/d"), ("redis-admin", "adm"), ("triton-inference-key", "tk")):
        (folder / name).write_text(value + "\n")
    return folder


def test_each_component_gets_its_own_user_and_password(tmp_path: Path) -> None:
    _secrets(tmp_path)
    config = _config(tmp_path, redis={"host": "h", "port": 7000})
    gateway = parse_url(config.redis_url("gateway"))
    assert (gateway["username"], gateway["password"], gateway["host"], gateway["port"]) == (
        "gateway",
        "g+w/d",
        "h",
        7000,
    )
    assert parse_url(config.redis_url("admin"))["username"] == "admin"
    assert "adm" not in config.redis.address and config.redis.address == "redis://h:7000/0"
    assert config.triton_grpc_headers() == {"triton-grpc-protocol-switchyard-inference-key": "tk"}
    assert config.triton_http_headers() == {"switchyard-inference-key": "tk"}


def test_a_missing_password_file_says_how_to_make_it(tmp_path: Path) -> None:
    _secrets(tmp_path)
    with pytest.raises(MissingSecretError, match=r"redis-dispatcher is missing.*make up"):
        _config(tmp_path).redis_url("dispatcher")


def test_tls_is_rediss_with_the_ca_and_client_certificate(tmp_path: Path) -> None:
    _secrets(tmp_path)
    redis_tls = {"tls": True, "ca_file": "ca.pem", "cert_file": "/abs/client.pem", "key_file": "client.key"}
    config = _config(tmp_path, redis=redis_tls)
    parsed = parse_url(config.redis_url("gateway"))
    assert parsed["connection_class"] is SSLConnection
    assert parsed["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    assert parsed["ssl_certfile"] == "/abs/client.pem"
    assert parsed["ssl_keyfile"] == str(tmp_path / "client.key")
    assert config.redis.address.startswith("rediss://")


def test_a_managed_redis_user_and_no_auth(tmp_path: Path) -> None:
    (tmp_path / "gw-pass").write_text("managed\n")
    users = {"gateway": {"username": "sy-gw", "password_file": "gw-pass"}}
    parsed = parse_url(_config(tmp_path, redis={"users": users}).redis_url("gateway"))
    assert (parsed["username"], parsed["password"]) == ("sy-gw", "managed")
    open_redis = parse_url(_config(tmp_path, redis={"auth": False}).redis_url("gateway"))
    assert "password" not in open_redis


def test_a_dumped_config_finds_the_same_secrets_from_elsewhere(tmp_path: Path) -> None:
    _secrets(tmp_path)
    (tmp_path / "gw-pass").write_text("managed\n")
    users = {"admin": {"username": "ops", "password_file": "gw-pass"}}
    config = _config(tmp_path, redis={"users": users, "tls": True, "ca_file": "ca.pem"})
    path = dump_config(config, tmp_path / "elsewhere" / "run" / "switchyard.yaml")
    again = load_config(path)
    assert again.redis_url("gateway") == config.redis_url("gateway")
    assert again.redis_url("admin") == config.redis_url("admin")
    assert "managed" not in path.read_text() and "g+w" not in path.read_text()
    assert yaml.safe_load(path.read_text())["secrets_dir"] == str((tmp_path / "var" / "secrets").resolve())
