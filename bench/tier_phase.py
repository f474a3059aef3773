"""One pass of the tiers bench's schedule against the gateway (`bench/bench_tiers.py`): every
request sent at its arrival time on the benches' SSE client (`bench/live.py`), what each
attempt got kept.

Open loop: a request is sent when its time comes whatever the others are doing. Batch work
is retried after a refusal as the bulk dispatcher retries it (after Retry-After, until the
phase's retry deadline); every other tier is sent once, as a person's request is.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx

from bench.live import StreamTrace, stream_generate
from bench.tier_mix import TieredRequest
from config.tier_names import ServiceTier

RETRIED_STATUSES = (429, 503)
MAX_RETRY_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """An attempt answered with an HTTP error before any token: its status, Retry-After and
    the error body's `code` (None when absent)."""

    status: int
    retry_after_s: float | None
    code: str | None
    message: str


def refusal_of(trace: StreamTrace) -> Refusal | None:
    """The refusal an attempt got, parsed from `StreamTrace.error` ("HTTP 429: {body}");
    None for a stream that opened (a failure after that is not a refusal)."""
    if trace.error is None or not trace.error.startswith("HTTP "):
        return None
    head, _, body = trace.error.partition(": ")
    code: str | None = None
    message = body
    try:
        error = json.loads(body).get("error", {})
        code, message = error.get("code"), error.get("message", body)
    except (json.JSONDecodeError, AttributeError):
        pass
    return Refusal(int(head.split()[1]), trace.retry_after_s, code, message)


@dataclass(slots=True)
class RequestOutcome:
    """A request and its attempts, the last one what it finally got."""

    request: TieredRequest
    sent_class: str
    attempts: list[StreamTrace] = field(default_factory=list)

    @property
    def last(self) -> StreamTrace | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def refusals(self) -> list[Refusal]:
        return [r for r in map(refusal_of, self.attempts) if r is not None]

    @property
    def final_refusal(self) -> Refusal | None:
        """The refusal it was left with (None: it ran)."""
        last = self.last
        return None if last is None else refusal_of(last)

    @property
    def completed(self) -> bool:
        """Its whole reply came: a stop reason and no error."""
        last = self.last
        return last is not None and last.error is None and last.stop_reason is not None

    @property
    def failed(self) -> str | None:
        """An error other than a refusal (a failed stream, an SSE error event), as the client saw it."""
        last = self.last
        if last is None or last.error is None or refusal_of(last) is not None:
            return None
        return last.error

    @property
    def ttft_s(self) -> float | None:
        """First token after the first attempt began (a retried batch request's wait counts)."""
        last = self.last
        if last is None or not last.event_times:
            return None
        return last.event_times[0] - self.attempts[0].started

    @property
    def tpot_s(self) -> float | None:
        """The mean time per token after the first delta; None before a second delta."""
        last = self.last
        if last is None or len(last.event_times) < 2:
            return None
        later_tokens = last.completion_tokens - last.event_tokens[0]
        return (last.event_times[-1] - last.event_times[0]) / later_tokens if later_tokens else None


async def run_phase(
    url: str,
    model: str,
    requests: list[TieredRequest],
    clients: dict[tuple[str, ServiceTier], httpx.AsyncClient],
    *,
    baseline: bool,
    retry_for_s: float,
    drain_s: float,
) -> list[RequestOutcome]:
    """Send `requests` at their times on `clients[(team, tier)]`; batch retries refusals until
    `retry_for_s` after the start. Requests still running `drain_s` after the last arrival are
    cancelled (their traces keep what arrived)."""
    start = time.perf_counter()
    outcomes = [RequestOutcome(r, r.sent_class(baseline)) for r in requests]

    async def send(outcome: RequestOutcome) -> None:
        request = outcome.request
        client = clients[(request.team, request.tier)]
        await asyncio.sleep(max(0.0, request.at_s - (time.perf_counter() - start)))
        while True:
            trace = StreamTrace(started=0.0)
            outcome.attempts.append(trace)
            await stream_generate(client, url, request.body(model, baseline), trace)
            refusal = refusal_of(trace)
            if request.tier != "batch" or refusal is None or refusal.status not in RETRIED_STATUSES:
                return
            wait = min(refusal.retry_after_s or 1.0, MAX_RETRY_WAIT_S)
            if time.perf_counter() + wait - start > retry_for_s:
                return
            await asyncio.sleep(wait)

    tasks = [asyncio.create_task(send(o)) for o in outcomes]
    last_arrival = max((r.at_s for r in requests), default=0.0)
    _, pending = await asyncio.wait(tasks, timeout=last_arrival + drain_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return outcomes


def open_clients(
    headers: dict[tuple[str, ServiceTier], dict[str, str]],
) -> dict[tuple[str, ServiceTier], httpx.AsyncClient]:
    """One client per (team, tier) with its headers; no pool limit (an overloaded gateway
    holds many requests open at once, and a client-side queue would hide its waits)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    return {key: httpx.AsyncClient(timeout=None, headers=h, limits=limits) for key, h in headers.items()}
