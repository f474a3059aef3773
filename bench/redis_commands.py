"""Commands clients send to a Redis, counted from MONITOR: what a request costs Redis in round
trips' worth of commands (those run inside scripts are Redis's own, counted apart from
INFO commandstats)."""

from __future__ import annotations

import threading
import time

import redis


class ClientCommands:
    """Commands clients send (MONITOR lines not run inside a script), counted on a thread.
    `count()` sends a marker and waits for MONITOR to echo it, so nothing sent before is
    missed; the markers and INFO calls are not counted."""

    def __init__(self, url: str) -> None:
        self._count = 0
        self._marks: set[str] = set()
        self._cond = threading.Condition()
        self._redis_url = url
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor().__enter__()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()
        self.count()

    def _listen(self) -> None:
        try:
            for command in self._monitor.listen():
                words = str(command.get("command", "")).split(" ")
                with self._cond:
                    if words[0].upper() == "ECHO" and len(words) > 1 and words[1].startswith("sy-bench-mark-"):
                        self._marks.add(words[1])
                        self._cond.notify_all()
                    elif command.get("client_type") != "lua" and words[0].upper() != "INFO":
                        self._count += 1
        except (redis.ConnectionError, ValueError, AttributeError):
            return

    def count(self) -> int:
        mark = f"sy-bench-mark-{time.time_ns()}"
        with redis.Redis.from_url(self._redis_url) as r:
            r.echo(mark)
        with self._cond:
            assert self._cond.wait_for(lambda: mark in self._marks, timeout=30), "MONITOR never echoed the mark"
            return self._count

    def stop(self) -> None:
        self._client.close()
