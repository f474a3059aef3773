"""`LatencyLog`: where one request's time went inside a server, one JSON line per request and hop.

Off unless the process's environment names a file in `SWITCHYARD_LATENCY_LOG` (a debugging
aid for docs/latency.md, not a metric): each gateway worker and each model process that serves
a request appends one line when the request ends, holding the wall-clock stamps (`time.time()`)
it took on the way, so the lines of the gateway, `llm` and the engine model line up with each
other and with a client on the same machine:

    {"hop": "gateway", "request_id": "team/r1", "started": ..., "admitted": ..., ...}
    {"hop": "llm", "request_id": "team/r1", "received": ..., "preprocessed": ..., ...}
    {"hop": "cpu_engine", "request_id": "team/r1", "submitted": ..., "added": ..., ...}

A line per request (never per token), written with one `write` on a file opened for append, so
the lines of several processes do not interleave.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

LATENCY_LOG_ENV = "SWITCHYARD_LATENCY_LOG"


class LatencyLog:
    """Appends per-request stamp lines to one file; safe to call from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> LatencyLog | None:
        """The log `SWITCHYARD_LATENCY_LOG` names, or None when it is unset or empty."""
        path = environ.get(LATENCY_LOG_ENV, "")
        return cls(Path(path)) if path else None

    def write(self, hop: str, request_id: str, marks: Mapping[str, float | int | None]) -> None:
        """One line: the hop (the process's name), the request and its stamps. A failed write
        (a full disk) is logged, never raised: the request it describes must end as it would
        without the log."""
        line = json.dumps({"hop": hop, "request_id": request_id, **marks}) + "\n"
        try:
            with self._lock:
                os.write(self._fd, line.encode())
        except OSError:
            logger.warning("could not write to the latency log %s", self.path, exc_info=True)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)
