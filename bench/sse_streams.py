"""Many open SSE streams of `POST /v1/generate` from one client process, on raw asyncio sockets.

Each stream is one connection of the benches' SSE client (`sse_connection.py`: why not httpx,
and what it costs per event): the request written by hand, the response's status read, then
the `data:` lines counted as they arrive. A stream is open once its first event is in; it is
then held, with no task of its own, until the process is told to close (the connection is
dropped, which the gateway sees as a client that left: the request is cancelled).

    LoadSpec ─▶ run_load (a process) ─▶ ("opened", LoadReport) ... close set ... ("closed", LoadReport)
    probe_ttfts (a process): a few short requests, one after another, their time to first event
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.sse_connection import CLOSED, DONE, SseConnection, StreamFailed, generate_request, open_stream
from config.process_limits import raise_open_files_limit

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
        body = {"model": self.model, "prompt": "the quick brown fox", "max_tokens": max_tokens}
        return generate_request(self.host, self.port, self.api_key, body)


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


@dataclass(slots=True)
class LoadTally:
    """What a client process's streams have seen so far (the gRPC door's too: `door_streams`)."""

    opened: int = 0
    settled: int = 0  # opened or failed to
    events: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    closing: bool = False

    def report(self, open_s: float) -> LoadReport:
        return LoadReport(self.opened, self.events, dict(self.errors), open_s)

    def count_events(self, _: bytes, events: int) -> None:
        self.events += events

    def count_end(self, ended: asyncio.Future[str]) -> None:
        """An open stream's end: an error unless this side closed it (a held stream that
        reaches `[DONE]` ended early)."""
        kind = ended.result()
        if kind != CLOSED and not self.closing:
            self.errors["ended early" if kind == DONE else kind] += 1


async def _open(target: Target, source_ip: str, request: bytes, tally: LoadTally) -> SseConnection:
    """One stream opened, its end counted in `tally` from then on."""
    connection = await open_stream(target.host, target.port, request, tally.count_events, source_ip)
    connection.ended.add_done_callback(tally.count_end)
    return connection


async def _one(
    spec: LoadSpec, request: bytes, gate: asyncio.Semaphore, deadline: float, tally: LoadTally
) -> SseConnection | None:
    try:
        async with gate:
            timeout = deadline - time.monotonic()
            connection = await asyncio.wait_for(_open(spec.target, spec.source_ip, request, tally), timeout)
    except StreamFailed as failed:
        tally.errors[failed.kind] += 1
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
    tally = LoadTally()
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
    tally = LoadTally()
    for _ in range(count):
        began = time.perf_counter()
        try:
            connection = await asyncio.wait_for(_open(target, source_ip, request, tally), 30.0)
        except StreamFailed as failed:
            tally.errors[failed.kind] += 1
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
