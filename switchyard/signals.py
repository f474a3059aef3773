"""Foreground commands (`switchyard up`, `switchyard triton`) run until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT (Ctrl-C) or SIGTERM while inside the block; the previous
    handlers come back on exit, so cleanup code still runs normally."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
