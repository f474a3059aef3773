"""A local `redis-server` for the platform and for the tests: append-only, so an accepted
request survives a restart, with its data and log under `var/`.

It listens on 127.0.0.1 only and loads the ACL file made from the secrets folder
(fleet/launch/secret_files.py): the `default` user is off, so every client logs in as one of
the components' users (`SwitchyardConfig.redis_url(component)`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import redis

from fleet.launch.process import ManagedProcess, wait_until
from fleet.launch.secret_files import SecretFiles, ensure_secret_files


class RedisServer:
    """Start and stop a `redis-server` on one port, data in `data_dir`, users from the secrets
    in `secrets_dir` (made there on first use)."""

    def __init__(
        self, port: int, data_dir: Path, log_path: Path, *, secrets_dir: Path, host: str = "127.0.0.1"
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `make up` (installs it with apt)")
        data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port
        self.secrets: SecretFiles = ensure_secret_files(secrets_dir)
        self._process = ManagedProcess(
            "redis",
            [
                binary,
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

    def stop(self) -> None:
        self._process.stop()
