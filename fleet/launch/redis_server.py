"""A local `redis-server` for the platform and for the tests: append-only, so an accepted
request survives a restart, with its data and log under `var/`."""

from __future__ import annotations

import shutil
from pathlib import Path

import redis

from fleet.launch.process import ManagedProcess, wait_until


class RedisServer:
    """Start and stop a `redis-server` on one port, data in `data_dir`."""

    def __init__(self, port: int, data_dir: Path, log_path: Path, host: str = "127.0.0.1") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `make up` (installs it with apt)")
        data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port
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
                "--protected-mode",
                "no",
            ],
            log_path,
        )

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def ping(self) -> bool:
        try:
            return bool(redis.Redis(host=self.host, port=self.port, socket_timeout=0.5).ping())
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
