"""A minimal config whose Redis is a test's replica set, reached through its sentinels."""

from __future__ import annotations

from pathlib import Path

from config.settings import SwitchyardConfig
from stack.redis_sentinel import RedisReplicaSet


def replica_set_config(replicas: RedisReplicaSet, root: Path) -> SwitchyardConfig:
    return SwitchyardConfig.model_validate(
        {
            "root": root,
            "models": {"m": {"weights_uri": "m", "max_context_tokens": 64}},
            "pools": {"m": {"model_id": "m", "ports": {"http": 9101, "grpc": 9102, "metrics": 9103}}},
            "redis": replicas.redis_settings(),
            "secrets_dir": str(root / "secrets"),
        }
    )
