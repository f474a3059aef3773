"""A local `redis-server` for the platform and for the tests: append-only, so an accepted
request survives a restart, with its data and log under `var/`.

It listens on 127.0.0.1 only and loads the ACL file made from the secrets folder
(stack/secret_files.py): the `default` user is off, so every client logs in as one of
the components' users (`config.redis_client`).

Every server also gets the replication login (`masteruser replication`, the password from the
secrets folder, in a 0600 file in its data folder rather than on its command line): a replica
needs it to follow its primary, and a primary needs it once Sentinel demotes it to a replica
after a failover (stack/redis_sentinel.py, docs/redis.md).

In a replica set every node also gets `min-replicas-to-write`: a primary that has heard from
too few replicas for `min-replicas-max-lag` seconds refuses writes (NOREPLICAS), so a primary
cut off from its replica and the sentinels stops taking writes the promoted replica would not
have (docs/redis.md). Every node, since any may be the primary after a failover. And
`repl-diskless-sync-delay 0`: a primary that restarted (new replication id, so each replica
needs a full sync) refuses writes until a replica has synced, so the sync starts at once.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

import redis

from server_host.process import ManagedProcess, wait_until
from stack.secret_files import REPLICATION_USER, SecretFiles, ensure_secret_files


class RedisServer:
    """Start and stop a `redis-server` on one port, data in `data_dir`, users from the secrets
    in `secrets_dir` (made there on first use)."""

    def __init__(
        self,
        port: int,
        data_dir: Path,
        log_path: Path,
        *,
        secrets_dir: Path,
        host: str = "127.0.0.1",
        replica_of: tuple[str, int] | None = None,
        maxclients: int = 4096,
        min_replicas_to_write: int = 0,
        min_replicas_max_lag_s: int = 10,
        launcher: Sequence[str] = (),
    ) -> None:
        """`replica_of`: start as a replica of that primary (host, port). `maxclients`: the
        connections it accepts (redis-server raises its own open-files limit to fit them, up to
        the hard limit; docs/capacity.md sizes it). `min_replicas_to_write`: as a primary,
        refuse writes while fewer replicas than this have acknowledged within
        `min_replicas_max_lag_s` (0: never refuse). `launcher`: a prefix for its command line
        (`ip netns exec NAME`: a host of its own in a test)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `make up` (installs it with apt)")
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        self.host = host
        self.port = port
        self.secrets: SecretFiles = ensure_secret_files(secrets_dir)
        login = data_dir / "replication.conf"
        _write_private(login, f"masteruser {REPLICATION_USER}\nmasterauth {self.secrets.replication_password}\n")
        replica = ["--replicaof", replica_of[0], str(replica_of[1])] if replica_of is not None else []
        self._process = ManagedProcess(
            "redis",
            [
                *launcher,
                binary,
                str(login.resolve()),
                "--bind",
                host,
                "--port",
                str(port),
                "--dir",
                str(data_dir.resolve()),
                "--appendonly",
                "yes",
                "--save",
                "",
                "--aclfile",
                str(self.secrets.acl_file.resolve()),
                "--maxclients",
                str(maxclients),
                # Dead clients (a host powered off) are noticed in seconds, not 300 s.
                "--tcp-keepalive",
                "10",
                "--min-replicas-to-write",
                str(min_replicas_to_write),
                "--min-replicas-max-lag",
                str(min_replicas_max_lag_s),
                # A restarted primary syncs its replicas at once: with min-replicas-to-write it
                # takes no write until one has synced, and Redis's default waits 5 s for more
                # replicas to share one transfer (the chaos run: restart-redis 7.5 s, not 2).
                "--repl-diskless-sync-delay",
                "0",
                *replica,
            ],
            log_path,
        )

    @property
    def url(self) -> str:
        """The `admin` user's URL (tests and tools; components use their own users)."""
        return f"redis://admin:{self.secrets.redis_passwords['admin']}@{self.host}:{self.port}/0"

    @property
    def secrets_dir(self) -> Path:
        return self.secrets.directory

    def ping(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def start(self, timeout_s: float = 15.0) -> None:
        self._process.start()
        if not wait_until(lambda: self.ping() or not self._process.alive(), timeout_s) or not self.ping():
            tail = self._process.log_tail()
            self._process.stop()
            raise RuntimeError(f"redis-server did not become ready on port {self.port}:\n{tail}")

    def role(self) -> str | None:
        """`master` or `slave` as the server says now; None when it does not answer."""
        try:
            with redis.Redis.from_url(self.url, socket_timeout=0.5) as client:
                role = client.role()[0]
        except redis.RedisError:
            return None
        return role.decode() if isinstance(role, bytes) else str(role)

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing flushed, no goodbye to replicas or sentinels."""
        self._process.stop(timeout_s=5.0, sig=signal.SIGKILL)

    def stop(self) -> None:
        self._process.stop()


def _write_private(path: Path, text: str) -> None:
    """`text` in `path`, readable by its owner only from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
