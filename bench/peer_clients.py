"""The clients `bench peers` points at every gateway alike: OpenAI completions requests,
streamed and whole, from processes of their own (the completions route, not chat: the
project's bench model has no chat template, and the route is the same hop for every peer).

    CompletionTarget.request(n)  the bytes of a streamed `POST /v1/completions` (HTTP/1.1, the
                           connection closed after the reply), read by the benches' SSE client
                           (`sse_connection.py`: every event a `data:` line; a chunked reply's
                           size lines hold none)
    hold_streams           a process: open its streams, then hold them, publishing the events
                           read so far in a shared array, until told to close
    send_short             a process: 10-token whole replies at a fixed rate (open loop: each
                           sent at its time whatever the earlier ones are doing), on kept-alive
                           connections (one per request in flight, as an SDK's pool)
    probe_ttfts            sse_streams' probes: CompletionTarget is a Target, so they work unchanged
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.sse_connection import StreamFailed, open_stream
from bench.sse_streams import CLIENT_NICENESS, LoadTally, Target
from config.process_limits import raise_open_files_limit

PROMPT = "the quick brown fox"
PUBLISH_S = 0.1  # how often a holding process publishes its counts
# A shared array's slots per client process: events read, errors so far, streams open.
SLOTS = 3


def completion_body(model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "stream": stream,
    }


def completion_request(host: str, port: int, api_key: str, body: dict[str, Any], keep_alive: bool) -> bytes:
    """The bytes of `POST /v1/completions` carrying `body`."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nAccept: {'text/event-stream' if body.get('stream') else 'application/json'}"
        f"\r\nContent-Length: {len(payload)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + payload


@dataclass(frozen=True, slots=True)
class CompletionTarget(Target):
    """A gateway's OpenAI completions route: streams of `max_tokens` tokens, one connection each."""

    def request(self, max_tokens: int) -> bytes:
        return completion_request(
            self.host, self.port, self.api_key, completion_body(self.model, max_tokens, True), False
        )


@dataclass(frozen=True, slots=True)
class HoldSpec:
    """One client process's share of a step: `streams` streams from `source_ip` (a loopback
    address of its own), `open_concurrency` opened at once, all within `open_deadline_s`."""

    target: CompletionTarget
    source_ip: str
    streams: int
    max_tokens: int
    open_concurrency: int
    open_deadline_s: float


async def _open_one(spec: HoldSpec, request: bytes, gate: asyncio.Semaphore, deadline: float, tally: LoadTally) -> Any:
    try:
        async with gate:
            left = deadline - time.monotonic()
            target = spec.target
            opening = open_stream(target.host, target.port, request, tally.count_events, spec.source_ip)
            connection = await asyncio.wait_for(opening, left)
    except StreamFailed as failed:
        tally.errors[failed.kind] += 1
        return None
    except TimeoutError:
        tally.errors["open timeout"] += 1
        return None
    except OSError as exc:
        tally.errors[type(exc).__name__] += 1
        return None
    connection.ended.add_done_callback(tally.count_end)
    tally.opened += 1
    return connection


async def _hold(spec: HoldSpec, counts: Any, index: int, close: Any, tally: LoadTally) -> None:
    request = spec.target.request(spec.max_tokens)
    gate = asyncio.Semaphore(spec.open_concurrency)
    deadline = time.monotonic() + spec.open_deadline_s
    opening = [asyncio.create_task(_open_one(spec, request, gate, deadline, tally)) for _ in range(spec.streams)]
    publish = asyncio.create_task(_publish(tally, counts, index))
    connections = [connection for connection in await asyncio.gather(*opening) if connection is not None]
    while not close.is_set():
        await asyncio.sleep(PUBLISH_S)
    tally.closing = True
    for connection in connections:
        connection.close()
    await asyncio.sleep(0.5)  # the transports' close callbacks
    publish.cancel()
    _store(tally, counts, index)


async def _publish(tally: LoadTally, counts: Any, index: int) -> None:
    while True:
        _store(tally, counts, index)
        await asyncio.sleep(PUBLISH_S)


def _store(tally: LoadTally, counts: Any, index: int) -> None:
    base = SLOTS * index
    counts[base], counts[base + 1], counts[base + 2] = tally.events, sum(tally.errors.values()), tally.opened


def hold_streams(spec: HoldSpec, counts: Any, index: int, close: Any, errors: Any) -> None:
    """A client process: open `spec.streams` streams and hold them until `close` (an Event) is
    set, keeping (events read, errors, streams open) in `counts[3 * index : 3 * index + 3]` (a
    shared array) every 0.1 s; at the end put (index, errors by kind) on `errors`."""
    raise_open_files_limit()
    os.nice(CLIENT_NICENESS)  # the gateway comes first on the shared cores
    tally = LoadTally()
    try:
        asyncio.run(_hold(spec, counts, index, close, tally))
    except Exception as exc:  # reported to the parent, which counts it
        tally.errors[type(exc).__name__] += 1
    errors.put((index, dict(tally.errors)))


@dataclass(frozen=True, slots=True)
class ShortSpec:
    """Short requests: `rate` a second for `seconds`, each asking `max_tokens` tokens, whole."""

    target: CompletionTarget
    rate: float
    seconds: float
    max_tokens: int


@dataclass(frozen=True, slots=True)
class ShortReport:
    """The short requests' latencies (s, the ones answered 200) and failures by kind."""

    latencies: list[float]
    errors: dict[str, int]
    sent: int


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: (status, body, whether the connection may be reused)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size + 2))
        await reader.readuntil(b"\r\n")
        body = b"".join(part[:-2] for part in parts)
    else:
        return status, await reader.read(), False
    return status, body, headers.get("connection") != "close"


async def _short(spec: ShortSpec) -> ShortReport:
    target = spec.target
    request = completion_request(
        target.host, target.port, target.api_key, completion_body(target.model, spec.max_tokens, False), True
    )
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def one() -> None:
        began = time.perf_counter()
        pair = idle.pop() if idle else None
        try:
            if pair is None:
                pair = await asyncio.open_connection(target.host, target.port)
            reader, writer = pair
            writer.write(request)
            status, body, reusable = await asyncio.wait_for(_read_reply(reader), 60.0)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[type(exc).__name__] += 1
            if pair is not None:
                pair[1].close()
            return
        if status == 200 and b'"choices"' in body:
            latencies.append(time.perf_counter() - began)
        else:
            errors[f"http {status}"] += 1
        if reusable:
            idle.append(pair)
        else:
            writer.close()

    count = round(spec.rate * spec.seconds)
    started = time.perf_counter()
    tasks = []
    for index in range(count):
        await asyncio.sleep(max(0.0, started + index / spec.rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()
    return ShortReport(latencies, dict(errors), count)


def send_short(spec: ShortSpec) -> ShortReport:
    """A client process's short requests (run it in a process of its own)."""
    raise_open_files_limit()
    return asyncio.run(_short(spec))
