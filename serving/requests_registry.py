"""Generation requests in flight, by request id: what DELETE cancels and what it reports.

Each accepted request runs in its own task (the *pump*) that reads the backend's deltas into an
`InflightRequest`; HTTP responses only read that record. So the generation's lifetime does not
hang on one HTTP connection: a DELETE from another connection cancels it, a disconnect cancels
it, and a later "attach to a running request" is one more reader of the same record.

    POST ──start()──▶ pump task ──backend.generate()──▶ InflightRequest.deltas ──▶ SSE / JSON
    DELETE ─cancel()─▶ backend.cancel(id); after a grace period, pump_task.cancel()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import replace
from typing import Protocol

from contracts.errors import grammar_failed, invalid_request
from contracts.generation import (
    GRAMMAR_FAILED,
    BackendError,
    GenerationBackend,
    GenerationDelta,
    GenerationRequest,
    Logprobs,
    RequestClass,
    RequestRejected,
    Usage,
)
from serving.metrics import GatewayMetrics

logger = logging.getLogger(__name__)


class RequestIdInUse(Exception):
    """A request with this id is already in flight."""


class GenerationHooks(Protocol):
    """What else happens as a generation runs (idempotency records, leases, usage).

    `on_delta` runs in the pump after each delta with text or tokens; `on_finish` runs once,
    in its own task, after the request ended however it ended."""

    async def on_delta(self, entry: InflightRequest, delta: GenerationDelta) -> None: ...

    async def on_finish(self, entry: InflightRequest) -> None: ...


class InflightRequest:
    """One running generation: deltas so far, usage so far, and how it ended once it has."""

    def __init__(
        self,
        request: GenerationRequest,
        prompt_tokens: int,
        started_at: float,
        public_id: str | None = None,
        hooks: GenerationHooks | None = None,
    ) -> None:
        self.request = request
        # The tier that serves it (contracts/service_tier.py), as the caller's answer names it:
        # the class it was admitted at, even when it runs at bulk priority on borrowed room.
        self.request_class: RequestClass = request.request_class
        # The id the caller knows; `request.request_id` is unique across teams (team/id).
        self.public_id = public_id or request.request_id
        self.hooks = hooks
        self.started_at = started_at
        self.usage = Usage(prompt_tokens=prompt_tokens)
        self.deltas: list[GenerationDelta] = []  # those that carried text or tokens
        # The prompt's log-probabilities (echo), from the first server that sent them.
        self.prompt_logprobs: Logprobs | None = None
        self.first_token_at: float | None = None
        self.stop_reason: str | None = None
        self.error: BaseException | None = None
        self._changed = asyncio.Event()
        self._done = asyncio.Event()
        # Connections reading this request (a repeat of its id attaches as one more): a
        # disconnect cancels the request only when it was the last reader.
        self.readers = 0
        # A caller reads it as a stream (its own or a repeat's): what was sent reached a client
        # even if the request then fails. A whole reply that fails reached no one.
        self.streamed = False
        # Tokens an earlier generation of this id wrote, replayed to the engine and carried into
        # this reply (a resumed one): the servers count only what they write themselves.
        self.carried_tokens = 0
        # Someone asked to stop it (DELETE, the last reader gone): a stream that fails after
        # that ends as the cancel asked, not as a failure to retry.
        self.cancel_requested = False

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def text(self) -> str:
        return "".join(delta.text for delta in self.deltas)

    def carry(self, deltas: list[GenerationDelta], now: float) -> None:
        """Start this reply with an earlier generation's `deltas` (it resumes that one)."""
        for delta in deltas:
            self.apply(delta, now)
        self.carried_tokens = self.usage.completion_tokens

    def apply(self, delta: GenerationDelta, now: float) -> None:
        """Record one backend delta. The server's counters win over ours when it sends them
        (plus the tokens carried from an earlier generation, which it did not write)."""
        if delta.usage is not None:
            self.usage = replace(delta.usage, completion_tokens=delta.usage.completion_tokens + self.carried_tokens)
        elif delta.token_ids:
            self.usage = replace(self.usage, completion_tokens=self.usage.completion_tokens + len(delta.token_ids))
        if delta.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = delta.prompt_logprobs
        if delta.text or delta.token_ids:
            if self.first_token_at is None:
                self.first_token_at = now
            self.deltas.append(delta)
        if delta.finish_reason is not None:
            self.stop_reason = delta.finish_reason
            if delta.finish_reason == GRAMMAR_FAILED and self.error is None:
                # Its grammar gave up: every door answers the 400, never a normal end.
                self.error = grammar_failed(self.usage.completion_tokens)
        self._notify()

    def finish(self, stop_reason: str | None = None, error: BaseException | None = None) -> None:
        """Mark the request ended (idempotent: the first ending wins)."""
        if self.done:
            return
        if self.stop_reason is None:
            self.stop_reason = stop_reason
            self.error = error
        self._done.set()
        self._notify()

    def _notify(self) -> None:
        # Wake every current waiter, then arm a fresh event for the next change.
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, seen: int, timeout: float | None = None) -> bool:
        """Wait until there are more than `seen` deltas or the request ended; False on timeout."""
        if len(self.deltas) > seen or self.done:
            return True
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:  # not the builtin before Python 3.11
            return False
        return True

    async def wait_started(self) -> None:
        """Until the first text or the end, whichever comes first."""
        while not self.deltas and not self.done:
            await self.wait_changed(0)

    async def wait_done(self) -> None:
        await self._done.wait()


class RequestRegistry:
    """Starts, tracks and cancels the gateway's in-flight generations."""

    def __init__(
        self,
        backend: GenerationBackend,
        metrics: GatewayMetrics,
        cancel_grace_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._metrics = metrics
        self._cancel_grace_s = cancel_grace_s
        # How long a cancelled task may take to end (its stream's close) before it is
        # cancelled again.
        self._recancel_s = max(cancel_grace_s, 0.1)
        self._clock = clock
        self._inflight: dict[str, InflightRequest] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[object]] = set()

    def get(self, request_id: str) -> InflightRequest | None:
        return self._inflight.get(request_id)

    def __len__(self) -> int:
        return len(self._inflight)

    def start(
        self,
        request: GenerationRequest,
        prompt_tokens: int,
        *,
        public_id: str | None = None,
        hooks: GenerationHooks | None = None,
    ) -> InflightRequest:
        """Accept `request` and start generating it in the background."""
        if request.request_id in self._inflight:
            raise RequestIdInUse(request.request_id)
        entry = InflightRequest(request, prompt_tokens, self._clock(), public_id, hooks)
        task = asyncio.create_task(self._pump(entry), name=f"generate:{request.request_id}")
        self._inflight[request.request_id] = entry
        self._tasks[request.request_id] = task
        self._metrics.in_flight.labels(request.model_id, request.request_class).inc()
        task.add_done_callback(lambda t: self._on_pump_done(entry, t))
        return entry

    def attach(
        self, request_id: str, public_id: str, model_id: str, source: AsyncIterator[GenerationDelta]
    ) -> InflightRequest:
        """A read-only request fed by `source` (a generation recorded elsewhere, replayed then
        followed). It is not in flight here: cancelling its readers leaves the owner alone."""
        request = GenerationRequest(request_id=request_id, model_id=model_id, prompt="", max_tokens=1)
        entry = InflightRequest(request, 0, self._clock(), public_id)

        async def follow() -> None:
            try:
                async for delta in source:
                    entry.apply(delta, self._clock())
                    if delta.finish_reason is not None:
                        break
            except BackendError as exc:
                entry.finish(error=exc)
            except Exception as exc:  # never an empty "aborted" reply for a source that broke
                logger.exception("following %s failed", request_id)
                entry.finish(error=BackendError(f"following the request failed: {exc!r}"))
            finally:
                entry.finish(stop_reason=entry.stop_reason or "aborted")

        self._in_background(follow())
        return entry

    async def cancel(self, request_id: str) -> InflightRequest | None:
        """Cancel a request and wait until it has ended; None if it is not in flight.

        The backend is asked first, so the stream ends through its normal path; a backend that
        does not know the id yet (or ignores it) gets its reading task cancelled instead.
        """
        entry = self._inflight.get(request_id)
        task = self._tasks.get(request_id)
        if entry is None or task is None:
            return None
        entry.cancel_requested = True
        if not await self._backend.cancel(request_id):
            task.cancel()
        await asyncio.wait({task}, timeout=self._cancel_grace_s)
        while not task.done():  # a cancel can be lost: see close()
            task.cancel()
            await asyncio.wait({task}, timeout=self._recancel_s)
        return entry

    async def settled(self) -> None:
        """Until every request in flight has ended and what each does at its end is done."""
        while self._tasks or self._background:
            await asyncio.gather(*self._tasks.values(), *self._background, return_exceptions=True)

    def cancel_soon(self, request_id: str) -> None:
        """`cancel()` from code that must not await (a response closing under cancellation)."""
        if request_id not in self._inflight:
            return
        self._in_background(self.cancel(request_id))

    async def close(self) -> None:
        """Shutdown: cancel everything still running, and wait for it and for what it does at
        its end (the hooks' `on_finish`: its record, its lease, its usage)."""
        pending = set(self._tasks.values())
        while pending:
            # Again and again: a cancel can be lost (Python 3.11's asyncio.wait_for, which
            # redis-py uses under a socket timeout, swallows one that lands as a hook's command
            # completes), and one lost cancel must not hang the shutdown.
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=self._recancel_s)
        await asyncio.gather(*self._background, return_exceptions=True)

    async def _pump(self, entry: InflightRequest) -> None:
        stream = self._backend.generate(entry.request)
        try:
            last_delta_at: float | None = None
            async for delta in stream:
                first = entry.first_token_at is None
                now = self._clock()
                entry.apply(delta, now)
                if first and entry.first_token_at is not None:
                    self._observe_first_token(entry)
                if delta.token_ids:
                    if last_delta_at is not None:
                        labels = (entry.request.model_id, entry.request.request_class)
                        self._metrics.inter_token.labels(*labels).observe(now - last_delta_at)
                    last_delta_at = now
                if entry.hooks is not None and (delta.text or delta.token_ids):
                    await entry.hooks.on_delta(entry, delta)
                if delta.finish_reason is not None:
                    break
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _observe_first_token(self, entry: InflightRequest) -> None:
        assert entry.first_token_at is not None
        labels = (entry.request.model_id, entry.request.request_class)
        self._metrics.time_to_first_token.labels(*labels).observe(entry.first_token_at - entry.started_at)

    def _on_pump_done(self, entry: InflightRequest, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            entry.finish(stop_reason="cancelled")
        elif entry.cancel_requested and isinstance(task.exception(), BackendError):
            # The stream broke while its cancel was on the way (a link cut, say): the client
            # asked it to stop and it stopped. Recorded as an error, a retry with its id would
            # replay the failure (the partition run: a DELETE racing a flapping link).
            entry.finish(stop_reason="cancelled")
        elif (exc := task.exception()) is not None:
            if not isinstance(exc, BackendError):
                logger.error("request %s failed", entry.request_id, exc_info=exc)
            entry.finish(error=_as_api_error(exc))
        elif entry.stop_reason is None:
            entry.finish(error=BackendError("the backend ended the stream without a finish reason"))
        else:
            entry.finish()
        self._inflight.pop(entry.request_id, None)
        self._tasks.pop(entry.request_id, None)
        self._record(entry)
        if entry.hooks is not None:
            self._in_background(entry.hooks.on_finish(entry))

    def _in_background(self, work: Coroutine[object, object, object]) -> None:
        task: asyncio.Task[object] = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _record(self, entry: InflightRequest) -> None:
        labels = (entry.request.model_id, entry.request.request_class)
        self._metrics.in_flight.labels(*labels).dec()
        self._metrics.requests.labels(*labels, entry.stop_reason or "error").inc()
        team = entry.request.cache_namespace or "-"  # the gateway namespaces the cache by team
        self._metrics.team_requests.labels(team, *labels, entry.stop_reason or "error").inc()
        self._metrics.latency.labels(*labels).observe(self._clock() - entry.started_at)
        for kind, count in entry.usage.as_dict().items():
            self._metrics.tokens.labels(*labels, kind.removesuffix("_tokens")).inc(count)


def _as_api_error(exc: BaseException) -> BaseException:
    """A model server's refusal of the input is the caller's 400; other failures stay as they are."""
    if isinstance(exc, RequestRejected):
        return invalid_request(f"the model server refused this request: {exc.detail}")
    return exc
