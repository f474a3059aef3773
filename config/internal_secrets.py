"""The secrets components show each other, one file each in the config's `secrets_dir`.

    secrets_dir/                 (var/secrets locally: made by the first `make up`, mode 0700;
      redis-admin                 in Kubernetes the Secret `switchyard-internal`, mounted)
      redis-gateway              one Redis ACL user's password per component (0600)
      redis-dispatcher
      redis-fleet
      redis-users.acl            the ACL file redis-server loads (hashed passwords)
      redis-replication          a replica's login to its primary (sentinel mode)
      redis-sentinel             the sentinels' login to the data nodes and to each other
      triton-inference-key       the header value Triton demands on its inference endpoints

Only reading lives here (every component reads its own file); `stack/secret_files.py`
makes them. Nothing is ever regenerated once present: a running fleet keeps its credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

# One Redis ACL user per component; each process connects as the user of the part it plays.
#   gateway     the HTTP edge (keys, leases, usage, requests, batches' intake)
#   dispatcher  the bulk dispatcher
#   fleet       supervisors, servers' self-registration and load publishers, the autoscaler
#   admin       the operator's CLI (`switchyard keys`, `servers`, `usage`), `up`, tests, benches
RedisComponent = Literal["gateway", "dispatcher", "fleet", "admin"]
REDIS_COMPONENTS: tuple[RedisComponent, ...] = get_args(RedisComponent)

REDIS_ACL_FILE = "redis-users.acl"
# Sentinel mode (docs/redis.md): a replica's login to its primary, and the sentinels' login to
# the data nodes and to each other.
REDIS_REPLICATION_FILE = "redis-replication"
REDIS_SENTINEL_FILE = "redis-sentinel"
TRITON_KEY_FILE = "triton-inference-key"
# The header Triton checks on inference calls (lower case, as gRPC wants). Over gRPC Triton
# reads it from the metadata key with its own prefix in front.
TRITON_KEY_HEADER = "switchyard-inference-key"
TRITON_GRPC_KEY_HEADER = f"triton-grpc-protocol-{TRITON_KEY_HEADER}"


class MissingSecretError(RuntimeError):
    """A secret file is missing or empty: the message says which and how to make it."""


def redis_password_file(component: RedisComponent) -> str:
    """The file (in secrets_dir) that holds `component`'s Redis password."""
    return f"redis-{component}"


def read_secret(path: Path) -> str:
    """The secret in `path`, without surrounding whitespace."""
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        raise MissingSecretError(
            f"secret {path} is missing: `make up` (or `python -m stack.secret_files DIR`) makes it"
        ) from None
    if not value:
        raise MissingSecretError(f"secret {path} is empty")
    return value
