"""Foreground commands (`switchyard up`, `switchyard triton`) run until SIGINT or SIGTERM.

`switchyard up` stops on either. A server process (`switchyard triton`) tells them apart:
SIGTERM drains it (in-flight replies finish first), SIGINT stops it at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ShutdownRequest:
    """What a server process was asked to do: `requested` is set by SIGTERM or SIGINT;
    `immediate` too by SIGINT (stop now), so SIGTERM alone means "drain, then stop"."""

    requested: threading.Event
    immediate: threading.Event


@contextmanager
def drain_on_sigterm() -> Iterator[ShutdownRequest]:
    """SIGTERM asks for a drain, SIGINT (also during a drain) for a stop at once; the previous
    handlers come back on exit."""
    request = ShutdownRequest(threading.Event(), threading.Event())

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            request.immediate.set()
        request.requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
