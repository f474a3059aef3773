"""One real `tritonserver` for the integration tests, started once per session.

`triton_pool` builds a tiny model (seconds), fills its model repository and starts the server
through `server_host.triton_server.TritonServer` on free ports. Other suites (the gateway's
integration tests) reuse it:

    def test_something(triton_pool: TritonPool) -> None:
        client = tritonclient.grpc.aio.InferenceServerClient(triton_pool.grpc_url)
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from build_engines.build import build_model
from build_engines.repository import fill_repository
from config.settings import Ports, SwitchyardConfig, TeamSpec, dump_config
from quota.key_files import ADMIN_KEY_ENV
from quota.keys import SyncKeyStore
from server_host.ports import free_ports
from server_host.process import ManagedProcess, wait_until
from server_host.triton_server import TritonServer
from stack.redis_server import RedisServer
from stack.secret_files import ensure_secret_files
from tests.auth_headers import bearer

POOL_ID = "tiny"
MODEL_ID = "tiny"
# Small enough to build in well under a second and to decode quickly on two cores, big
# enough that prompts and replies exercise multi-block KV.
TINY_ARCHITECTURE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 512,
}
TINY_ENGINE = {
    "kv_capacity_tokens": 8192,
    "block_size": 16,
    "max_num_seqs": 16,
    "max_num_batched_tokens": 256,
}
MAX_CONTEXT_TOKENS = 8192


@dataclass(frozen=True)
class TritonPool:
    """A running Triton server for one pool, and where to reach it."""

    pool_id: str
    model_id: str
    model_dir: Path
    config: SwitchyardConfig
    server: TritonServer

    @property
    def grpc_url(self) -> str:
        """host:port, as `tritonclient.grpc` takes it."""
        return self.server.grpc_url

    @property
    def http_url(self) -> str:
        return self.server.http_url

    @property
    def metrics_url(self) -> str:
        """The full Prometheus URL (ends in /metrics)."""
        return self.server.metrics_url

    @property
    def headers(self) -> dict[str, str]:
        """What a gRPC inference call must carry (the gateway's key): `stream_infer(..., headers=)`."""
        return self.config.triton_grpc_headers()


def tiny_pool_config(root: Path) -> SwitchyardConfig:
    http, grpc, metrics = free_ports(3)
    return SwitchyardConfig.model_validate(
        {
            "root": root,
            "models": {
                MODEL_ID: {
                    "weights_uri": f"var/models/{MODEL_ID}",
                    "max_context_tokens": MAX_CONTEXT_TOKENS,
                    "architecture": TINY_ARCHITECTURE,
                    "seed": 5,
                }
            },
            "pools": {
                POOL_ID: {
                    "model_id": MODEL_ID,
                    "engine": TINY_ENGINE,
                    "ports": Ports(http=http, grpc=grpc, metrics=metrics).model_dump(),
                }
            },
        }
    )


@dataclass(frozen=True)
class TinyModel:
    """The tiny model, built once per session, and a one-pool configuration that serves it."""

    config: SwitchyardConfig
    model_dir: Path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """Built, not served: for tests that start servers of their own (the supervisor's)."""
    root = tmp_path_factory.mktemp("triton_pool")
    config = tiny_pool_config(root)
    model_dir = build_model(MODEL_ID, config.models[MODEL_ID], config.model_dir(MODEL_ID), log=lambda _: None)
    return TinyModel(config, model_dir)


@pytest.fixture(scope="session")
def triton_pool(tiny_model: TinyModel) -> Iterator[TritonPool]:
    config = tiny_model.config
    repository = fill_repository(config, POOL_ID)
    # As `make up` runs it: inference only with the key the gateway sends (TritonPool.headers).
    secrets = ensure_secret_files(config.secrets_path)
    server = TritonServer(
        repository,
        config.pools[POOL_ID].ports,
        var_dir=config.var_path,
        name=POOL_ID,
        inference_key=secrets.triton_inference_key,
        host=config.network.servers.bind_host,
        keepalive=config.network.triton_grpc,
    )
    with server:
        yield TritonPool(POOL_ID, MODEL_ID, tiny_model.model_dir, config, server)


@dataclass(frozen=True)
class LiveGateway:
    """A real gateway process in front of `triton_pool`, with Redis and a team's API key."""

    url: str
    api_key: str
    team_id: str
    config: SwitchyardConfig
    admin_key: str  # what the bulk dispatcher sends, acting for a team
    other_key: str  # a key of team `e2e-other`, which must not see `e2e`'s batches
    grpc_url: str = ""  # the gRPC front door (host:port, as tritonclient.grpc takes it)

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)


@pytest.fixture(scope="session")
def live_gateway(triton_pool: TritonPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    """One gateway for the session's end-to-end tests: team `e2e` may use the tiny model, at
    every tier.

    It has a Redis of its own: other suites empty the shared one before each test."""
    port, redis_port, grpc_port = free_ports(3)
    root = tmp_path_factory.mktemp("live_gateway")
    secrets_dir = triton_pool.config.secrets_path  # the same users the gateway's config names
    redis_server = RedisServer(redis_port, root / "redis", root / "redis.log", secrets_dir=secrets_dir)
    redis_server.start()
    config = triton_pool.config.model_copy(
        update={
            "redis": triton_pool.config.redis.model_copy(update={"port": redis_server.port}),
            "teams": {
                # Every tier granted (the service-tier tests); e2e-other has the default ones.
                "e2e": TeamSpec(weight=1.0, tiers={"priority": 1, "default": 1, "flex": 1, "batch": 1}),
                "e2e-other": TeamSpec(weight=1.0),
                # One long reply holds all but 200 of it (the gRPC door's over-share test).
                "e2e-capped": TeamSpec(weight=1.0, max_inflight_tokens=8000),
            },
            "gateway": triton_pool.config.gateway.model_copy(update={"grpc_port": grpc_port}),
        }
    )
    keys = SyncKeyStore(redis.Redis.from_url(redis_server.url), config.teams)
    api_key, other_key = keys.create("e2e"), keys.create("e2e-other")
    config_path = dump_config(config, config.var_path / "run" / "switchyard-e2e.yaml")
    # Two worker processes: a DELETE or a repeat may land on the worker that does not run
    # the request, so these tests cover the Redis-shared paths too.
    admin_key = f"sy-admin-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "SWITCHYARD_CONFIG": str(config_path),
        "SWITCHYARD_PORT": str(port),
        "SWITCHYARD_WORKERS": "2",
        ADMIN_KEY_ENV: admin_key,
    }
    process = ManagedProcess("gateway", [sys.executable, "-m", "gateway"], config.var_path / "logs" / "gw.log", env=env)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        with process:
            assert wait_until(lambda: ready() or not process.alive(), 60), process.log_tail()
            assert process.alive(), process.log_tail()
            yield LiveGateway(url, api_key, "e2e", config, admin_key, other_key, f"127.0.0.1:{grpc_port}")
    finally:
        redis_server.stop()
