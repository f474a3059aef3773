"""Many open SSE streams of `POST /v1/generate` from one client process, on raw asyncio sockets.

Each stream is one connection with an `asyncio.Protocol` of its own: the request written by
hand, the response's status read, then the `data:` lines counted as they arrive. A stream is
open once its first event is in; it is then held, with no task of its own, until the process
is told to close (the connection is dropped, which the gateway sees as a client that left: the
request is cancelled).

Why not httpx: at ten thousand streams the clients' CPU competes with the gateway's for the
same cores, and their memory is the machine's. Measured on the 2-core machine, one client
process holding 200 streams of the paced gateway (an event every 1-2 s each) for 20 s, twice
each: httpx.AsyncClient (`stream()` + `aiter_lines()`, a task per stream) took 390-400 µs of
CPU per event and 58-59 KB per open stream; this protocol 125-146 µs and 3.4 KB (at 1,000
streams 88-92 µs, half of it the kernel's receive path). The parsing is the minimum the bench
needs: the status, and which lines are events, the end, or an error.

    LoadSpec ─▶ run_load (a process) ─▶ ("opened", LoadReport) ... close set ... ("closed", LoadReport)
    probe_ttfts (a process): a few short requests, one after another, their time to first event
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from config.process_limits import raise_open_files_limit

HEAD_LIMIT = 64 * 1024
# Load clients run niced: on a machine with few cores the gateway's workers get the CPU first,
# and a client that reads an event late changes nothing measured (the bystander's probes, whose
# timing is measured, run at normal priority).
CLIENT_NICENESS = 10


@dataclass(frozen=True, slots=True)
class Target:
    """Where the streams go and as whom: the gateway's HTTP address and one team's key."""

    host: str
    port: int
    api_key: str
    model: str

    def request(self, max_tokens: int) -> bytes:
        body = json.dumps(
            {"model": self.model, "prompt": "the quick brown fox", "max_tokens": max_tokens, "stream": True}
        )
        head = (
            f"POST /v1/generate HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.api_key}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body.encode()


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One client process's share of a step: `streams` streams of `max_tokens` tokens from
    `source_ip` (a loopback address of its own, so no process runs out of ports), at most
    `open_concurrency` being opened at once, every one open within `open_deadline_s`."""

    target: Target
    source_ip: str
    streams: int
    max_tokens: int
    open_concurrency: int
    open_deadline_s: float


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a client process saw: streams open, events read, errors by kind (`http 429`, an
    exception's class, `ended early`, `sse error`, `open timeout`), seconds to open them all."""

    opened: int
    events: int
    errors: dict[str, int]
    open_s: float


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """Short requests' times to first event (s), and their errors by kind."""

    ttfts: list[float]
    errors: dict[str, int]


class Refused(Exception):
    """The stream never opened (`kind`: `http <status>`, `ended early`, `sse error`, or an
    exception's class)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(slots=True)
class _Tally:
    opened: int = 0
    settled: int = 0  # opened or failed to
    events: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    closing: bool = False

    def report(self, open_s: float) -> LoadReport:
        return LoadReport(self.opened, self.events, dict(self.errors), open_s)


class SseConnection(asyncio.Protocol):
    """One stream's connection: sends the request, reads the status, then counts `data:`
    lines as they arrive (only whole lines: a marker never straddles a read). No task per
    stream and no await per event: one callback per read."""

    def __init__(self, request: bytes, tally: _Tally) -> None:
        self.request = request
        self.tally = tally
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._status: int | None = None
        self._partial = b""  # the last, unfinished line
        self._refusal = b""  # the body of a response other than 200
        self._refusal_length = 0
        self._ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self._status is None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > HEAD_LIMIT:
                    self._end("head too long")
                return
            head, data, self._head = self._head[:end], self._head[end + 4 :], b""
            self._status = int(head.split(b" ", 2)[1])
            self._refusal_length = _content_length(head)
        if self._status != 200:
            self._refusal += data
            if len(self._refusal) >= self._refusal_length:
                self._end(self._refused_kind())
            return
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            self._partial += data
            return
        lines, self._partial = self._partial + data[:cut], data[cut:]
        done, error = b"data: [DONE]" in lines, b"event: error" in lines
        events = lines.count(b"data: ") - done - error
        if events:
            self.tally.events += events
            if not self.opened.done():
                self.opened.set_result(None)
        if done or error:
            self._end(f"sse error {_error_code(lines)}" if error else "ended early")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ended:
            return
        if self._status is not None and self._status != 200:
            self._end(self._refused_kind())
        else:
            self._end(type(exc).__name__ if exc is not None else "ended early")

    def _refused_kind(self) -> str:
        return f"http {self._status} {_error_code(self._refusal)}"

    def close(self) -> None:
        self._ended = True
        if self.transport is not None:
            self.transport.close()

    def _end(self, kind: str) -> None:
        """The stream is over: a refusal while opening, an error while open (unless closing)."""
        self._ended = True
        if not self.opened.done():
            self.opened.set_exception(Refused(kind))
        elif not self.tally.closing:
            self.tally.errors[kind] += 1
        if self.transport is not None:
            self.transport.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _error_code(text: bytes) -> str:
    """The gateway's error `code` (else `type`) in a JSON error body or SSE error event."""
    start = text.find(b"{")
    try:
        error = json.loads(text[start : text.rfind(b"}") + 1]).get("error", {}) if start >= 0 else {}
    except ValueError:
        return "?"
    return str(error.get("code") or error.get("type") or "?") if isinstance(error, dict) else "?"


async def open_stream(target: Target, source_ip: str, request: bytes, tally: _Tally) -> SseConnection:
    """Connect, send `request`, wait for the first event: the open stream, or `Refused`."""
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(
        lambda: SseConnection(request, tally), target.host, target.port, local_addr=(source_ip, 0)
    )
    try:
        await connection.opened
    except BaseException:
        connection.close()
        raise
    return connection


async def _one(
    spec: LoadSpec, request: bytes, gate: asyncio.Semaphore, deadline: float, tally: _Tally
) -> SseConnection | None:
    try:
        async with gate:
            timeout = deadline - time.monotonic()
            connection = await asyncio.wait_for(open_stream(spec.target, spec.source_ip, request, tally), timeout)
    except Refused as refused:
        tally.errors[refused.kind] += 1
        return None
    except TimeoutError:
        tally.errors["open timeout"] += 1
        return None
    except OSError as exc:
        tally.errors[type(exc).__name__] += 1
        return None
    finally:
        tally.settled += 1
    tally.opened += 1
    return connection


async def _load(spec: LoadSpec, reports: Any, index: int, close: Any) -> None:
    tally = _Tally()
    request = spec.target.request(spec.max_tokens)
    gate = asyncio.Semaphore(spec.open_concurrency)
    started = time.monotonic()
    deadline = started + spec.open_deadline_s
    opening = [asyncio.create_task(_one(spec, request, gate, deadline, tally)) for _ in range(spec.streams)]
    connections = [connection for connection in await asyncio.gather(*opening) if connection is not None]
    reports.put(("opened", index, tally.report(time.monotonic() - started)))
    while not close.is_set():
        await asyncio.sleep(0.1)
    tally.closing = True
    for connection in connections:
        connection.close()
    await asyncio.sleep(0.5)  # the transports' close callbacks
    reports.put(("closed", index, tally.report(time.monotonic() - started)))


def run_load(spec: LoadSpec, reports: Any, index: int, close: Any) -> None:
    """A client process: open `spec.streams` streams, put ("opened", index, LoadReport) on
    `reports` once all are open or failed, hold them until `close` (a multiprocessing Event)
    is set, then drop them and put ("closed", index, LoadReport)."""
    raise_open_files_limit()
    os.nice(CLIENT_NICENESS)  # the gateway's workers come first on the shared cores
    asyncio.run(_load(spec, reports, index, close))


async def _probes(target: Target, source_ip: str, count: int, spacing_s: float, max_tokens: int) -> ProbeReport:
    request = target.request(max_tokens)
    ttfts: list[float] = []
    tally = _Tally()
    for _ in range(count):
        began = time.perf_counter()
        try:
            connection = await asyncio.wait_for(open_stream(target, source_ip, request, tally), 30.0)
        except Refused as refused:
            tally.errors[refused.kind] += 1
        except (OSError, TimeoutError) as exc:
            tally.errors[type(exc).__name__] += 1
        else:
            ttfts.append(time.perf_counter() - began)
            connection.close()  # the rest of the reply comes at the load's pace: not waited for
        await asyncio.sleep(max(0.0, spacing_s - (time.perf_counter() - began)))
    return ProbeReport(ttfts, dict(tally.errors))


def probe_ttfts(target: Target, source_ip: str, count: int, spacing_s: float, max_tokens: int = 10) -> ProbeReport:
    """`count` requests of `max_tokens` tokens, one every `spacing_s`, each on a new connection
    (so both workers are sampled): their times from connecting to the first event."""
    return asyncio.run(_probes(target, source_ip, count, spacing_s, max_tokens))
