"""Make the deployment's internal secrets once, and the Redis ACL file from them.

    ensure_secret_files(dir)   each missing file made (random, 0600; the folder 0700);
                               an existing one is never touched: a running fleet keeps
                               its credentials across `make up`s
      redis-<component>        ─┐
      redis-replication         │
      redis-sentinel            │
      triton-inference-key      │ config/internal_secrets.py names them
      redis-users.acl          ◀┘ rewritten from the passwords on every call (hashed)

`make up` (stack/local_stack.py) and the test fixtures call it before starting redis-server; for
Kubernetes, `python -m stack.secret_files DIR` writes the same files for
`kubectl create secret generic switchyard-internal --from-file=DIR` (docs/deploy.md).

The ACL file turns the `default` user off (no unauthenticated client), gives the operator's
`admin` user every command, and the components' users Switchyard's keys and channels only
(`sy:*`) without the commands Redis calls dangerous (FLUSHALL, CONFIG, KEYS, DEBUG, ACL, ...).
Two more users serve sentinel mode and nothing else: `replication` (what a replica logs in to
its primary with: PSYNC, REPLCONF, PING) and `sentinel` (what a sentinel watches and reconfigures
the data nodes with: the commands Redis's docs list for it, on its hello channel). The sentinels
have their own ACL: `default` off, each component's user with its own password but SENTINEL
queries only (where is the primary), `admin` everything, `sentinel` for the sentinels' peers
(`sentinel_user_lines`, written into each sentinel's config by stack/redis_sentinel.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from config.internal_secrets import (
    REDIS_ACL_FILE,
    REDIS_COMPONENTS,
    REDIS_REPLICATION_FILE,
    REDIS_SENTINEL_FILE,
    TRITON_KEY_FILE,
    RedisComponent,
    read_secret,
    redis_password_file,
)

_SECRET_BYTES = 32  # 256 bits each, hex: nothing a URL or a shell has to quote
# What a component's user may do; `admin` may do everything.
COMPONENT_RULES = "~sy:* &sy:* +@all -@dangerous"
ADMIN_RULES = "~* &* +@all"
REPLICATION_USER = "replication"
REPLICATION_RULES = "+psync +replconf +ping"
SENTINEL_USER = "sentinel"
# Redis's documented minimum for a sentinel's user on the instances it monitors.
SENTINEL_RULES = (
    "&__sentinel__:hello +multi +slaveof +ping +exec +subscribe +config|rewrite +role +publish "
    "+info +client|setname +client|kill +script|kill"
)
# What a component may ask a sentinel: where the primary and its replicas are.
SENTINEL_CLIENT_RULES = (
    "+ping +hello +client|setname +sentinel|masters +sentinel|master +sentinel|slaves "
    "+sentinel|replicas +sentinel|sentinels +sentinel|get-master-addr-by-name"
)


@dataclass(frozen=True)
class SecretFiles:
    """The secrets folder and what it holds (read back from the files)."""

    directory: Path
    redis_passwords: dict[RedisComponent, str]
    triton_inference_key: str
    replication_password: str
    sentinel_password: str

    @property
    def acl_file(self) -> Path:
        return self.directory / REDIS_ACL_FILE


def ensure_secret_files(directory: Path) -> SecretFiles:
    """Make whatever secret is missing in `directory`, (re)write the ACL file, return them all."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    names = (*(redis_password_file(c) for c in REDIS_COMPONENTS), REDIS_REPLICATION_FILE, REDIS_SENTINEL_FILE)
    for name in (*names, TRITON_KEY_FILE):
        _create_once(directory / name, secrets.token_hex(_SECRET_BYTES))
    files = SecretFiles(
        directory,
        {c: read_secret(directory / redis_password_file(c)) for c in REDIS_COMPONENTS},
        read_secret(directory / TRITON_KEY_FILE),
        read_secret(directory / REDIS_REPLICATION_FILE),
        read_secret(directory / REDIS_SENTINEL_FILE),
    )
    _write_private(files.acl_file, acl_text(files))
    return files


def acl_text(files: SecretFiles) -> str:
    """redis-server's ACL file: `default` off, one user per component, the replication and
    sentinel users, passwords as SHA-256.

    `default` is off (no client can be it) yet may run every command: redis-server 7.0 replays
    its append-only file as `default`, and checks each transaction's commands at EXEC against
    that user, so a `default` without commands silently drops every MULTI/EXEC and every Lua
    script's writes (the leases, the idempotency claims, the batch marks) when it restarts."""
    lines = ["user default off resetpass ~* &* +@all"]
    for component, password in files.redis_passwords.items():
        rules = ADMIN_RULES if component == "admin" else COMPONENT_RULES
        lines.append(f"user {component} on #{_digest(password)} {rules}")
    lines.append(f"user {REPLICATION_USER} on #{_digest(files.replication_password)} {REPLICATION_RULES}")
    lines.append(f"user {SENTINEL_USER} on #{_digest(files.sentinel_password)} {SENTINEL_RULES}")
    return "\n".join(lines) + "\n"


def sentinel_user_lines(files: SecretFiles) -> list[str]:
    """The `user` lines of a sentinel's config: components may only ask where the primary is."""
    lines = ["user default off"]
    for component, password in files.redis_passwords.items():
        rules = "+@all" if component == "admin" else SENTINEL_CLIENT_RULES
        lines.append(f"user {component} on #{_digest(password)} {rules}")
    lines.append(f"user {SENTINEL_USER} on #{_digest(files.sentinel_password)} +@all")
    return lines


def _digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def _create_once(path: Path, value: str) -> None:
    """Write `value` to a new file readable by its owner only; leave an existing one alone."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, mode 0600 from the start."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stack.secret_files",
        description="Make the internal secrets (Redis users' passwords, their ACL file, Triton's "
        "inference key) in DIR, keeping any already there.",
    )
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    files = ensure_secret_files(args.directory)
    print(f"secrets in {files.directory}: {', '.join(sorted(p.name for p in files.directory.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
