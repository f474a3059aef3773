"""A load generator for the live demonstration: streamed /v1/generate requests sent on a
`Ramp`'s schedule, each one followed to its end, reported interval by interval.

Each request ends one of three ways:

    finished   the final SSE event came, with its stop reason (what every reply must do)
    cut        tokens came, then the stream ended without a final event, or with `event: error`
    error      refused or failed before its first token (429, 503, a connection error)

A cut reply is the failure the autoscaler must never cause: servers leave only by draining.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from switchyard.load_ramp import Ramp


@dataclass(slots=True)
class RequestOutcome:
    sent_at: float  # seconds into the run
    first_token_at: float | None = None
    ended_at: float | None = None
    stop_reason: str | None = None  # from the final event: the reply finished
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent_at

    @property
    def cut(self) -> bool:
        return self.ended_at is not None and self.first_token_at is not None and self.stop_reason is None


@dataclass(frozen=True, slots=True)
class IntervalReport:
    """What happened in [start_s, end_s): requests sent, first tokens and ends seen."""

    start_s: float
    end_s: float
    sent: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    finished: int
    errors: int
    cut: int
    in_flight: int

    @property
    def rate(self) -> float:
        return self.sent / max(self.end_s - self.start_s, 1e-9)


@dataclass(slots=True)
class LoadRun:
    outcomes: list[RequestOutcome] = field(default_factory=list)

    def report(self, start_s: float, end_s: float) -> IntervalReport:
        def within(t: float | None) -> bool:
            return t is not None and start_s <= t < end_s

        ttfts = sorted(o.ttft_s for o in self.outcomes if within(o.first_token_at) and o.ttft_s is not None)
        ended = [o for o in self.outcomes if within(o.ended_at)]
        return IntervalReport(
            start_s,
            end_s,
            sent=sum(1 for o in self.outcomes if within(o.sent_at)),
            ttft_p50_s=percentile(ttfts, 0.5),
            ttft_p99_s=percentile(ttfts, 0.99),
            finished=sum(1 for o in ended if o.stop_reason is not None),
            errors=sum(1 for o in ended if o.error is not None and o.first_token_at is None),
            cut=sum(1 for o in ended if o.cut),
            in_flight=sum(
                1 for o in self.outcomes if o.sent_at < end_s and (o.ended_at is None or o.ended_at >= end_s)
            ),
        )


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The nearest-rank percentile of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, int(q * len(sorted_values) + 0.999999) - 1))
    return sorted_values[rank]


class LoadGenerator:
    def __init__(
        self,
        gateway_url: str,
        api_key: str,
        model: str,
        *,
        prompt: str = "Tell me a story about a river",
        max_tokens: int = 32,
        request_class: str = "interactive",
        timeout_s: float = 120.0,
    ) -> None:
        self._url = f"{gateway_url.rstrip('/')}/v1/generate"
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._body = {"model": model, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                      "class": request_class}  # fmt: skip
        self._prompt = prompt
        self._timeout_s = timeout_s

    async def run(
        self,
        ramp: Ramp,
        *,
        report_every_s: float = 10.0,
        on_report: Callable[[IntervalReport], None] | None = None,
        start_at: float | None = None,
    ) -> LoadRun:
        """Send the ramp's requests (beginning at Unix time `start_at`, default now), wait for
        every one to end, and return them all; `on_report` gets each interval as it closes."""
        run = LoadRun()
        began = time.time() if start_at is None else start_at

        def clock() -> float:
            return time.time() - began

        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=self._timeout_s, limits=limits) as client:
            reported = [0.0]  # where the next report starts
            reporter = asyncio.create_task(self._report(run, clock, report_every_s, on_report, reported))
            tasks = []
            for index, offset in enumerate(ramp.arrivals()):
                await asyncio.sleep(max(0.0, offset - clock()))
                outcome = RequestOutcome(sent_at=clock())
                run.outcomes.append(outcome)
                tasks.append(asyncio.create_task(self._one(client, index, outcome, clock)))
            await asyncio.gather(*tasks)
            reporter.cancel()
        if on_report is not None:  # the last interval, up to now: a full one, so its rate reads right
            start = reported[0]
            on_report(run.report(start, max(clock() + 1e-6, start + report_every_s)))
        return run

    async def _report(
        self,
        run: LoadRun,
        clock: Callable[[], float],
        every_s: float,
        on_report: Callable[[IntervalReport], None] | None,
        reported: list[float],
    ) -> None:
        while True:
            start = reported[0]
            await asyncio.sleep(max(0.0, start + every_s - clock()))
            if on_report is not None:
                on_report(run.report(start, start + every_s))
            reported[0] = start + every_s

    async def _one(
        self, client: httpx.AsyncClient, index: int, outcome: RequestOutcome, clock: Callable[[], float]
    ) -> None:
        body = {**self._body, "prompt": f"{self._prompt} (request {index})"}
        try:
            async with client.stream("POST", self._url, json=body, headers=self._headers) as reply:
                if reply.status_code != 200:
                    outcome.error = f"HTTP {reply.status_code}"
                    return
                event = None
                async for line in reply.aiter_lines():
                    if line.startswith("event:"):
                        event = line.removeprefix("event:").strip()
                        continue
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    data = json.loads(line.removeprefix("data: "))
                    if event == "error":
                        outcome.error = str(data.get("error", data))
                        return
                    if "usage" in data:
                        outcome.stop_reason = str(data.get("stop_reason") or "")
                        return
                    if outcome.first_token_at is None and (data.get("text") or data.get("token_ids")):
                        outcome.first_token_at = clock()
        except (httpx.HTTPError, ValueError) as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        finally:
            outcome.ended_at = clock()
