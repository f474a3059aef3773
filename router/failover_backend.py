"""`GenerationBackend` over a fleet: route each request to a server, and fail over when one dies.

    generate(request)
      ├─ picker.pick(request, exclude=tried) ─▶ server           (none ready: 503 + Retry-After)
      ├─ stream from it, counting the token ids the client has
      ├─ it refuses the request's input ─▶ RequestRejected to the caller (a 400): no other
      │     server is tried and this one stays routable, since every server would refuse it
      ├─ it fails before the first token ─▶ another server, invisibly
      ├─ it fails mid-reply ─▶ another server with resume_token_ids = what the client has:
      │     its `llm` replays them (text dropped), so the stream goes on with nothing repeated
      │     or missing; greedy and seeded sampling continue exactly as one server would have
      └─ max_attempts servers failed ─▶ BackendUnavailable before any token, BackendError after

Usage counts each token once: a server reports the completion tokens it wrote itself, so the
tokens delivered by earlier servers are added to its count.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import replace
from typing import Protocol

from contracts.generation import (
    BackendError,
    BackendUnavailable,
    GenerationBackend,
    GenerationDelta,
    GenerationRequest,
    PoolReadiness,
    RequestRejected,
    Usage,
)
from quota.capacity import CapacitySource

logger = logging.getLogger(__name__)


class ServerPicker(Protocol):
    """Chooses servers and keeps the gateway's own in-flight accounting between metric scrapes."""

    def pick(self, request: GenerationRequest, exclude: Collection[str]) -> str | None: ...

    def started(self, server_id: str, request: GenerationRequest) -> None: ...

    def ended(self, server_id: str, request: GenerationRequest, failed: bool) -> None: ...

    async def readiness(self) -> list[PoolReadiness]: ...

    def predicted_ttft_s(
        self, model_id: str, request_tokens: int, prefix_block_hashes: Sequence[int]
    ) -> float | None: ...


class ServerStreams(Protocol):
    """Streams on one named server (`TritonBackend.stream_on`), cancellable by request id."""

    def stream_on(self, server_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]: ...

    async def cancel(self, request_id: str) -> bool: ...

    async def close(self) -> None: ...


class FailoverBackend(GenerationBackend):
    def __init__(
        self,
        picker: ServerPicker,
        streams: ServerStreams,
        *,
        max_attempts: int = 3,
        retry_after_s: int = 5,
        capacity: CapacitySource | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`capacity`: each pool's KV as the picker's directory sees it (what admission counts);
        `on_close`: releases what the directory holds."""
        self._picker = picker
        self._streams = streams
        self._max_attempts = max_attempts
        self._retry_after_s = retry_after_s
        self.capacity = capacity
        self._on_close = on_close

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        delivered: list[int] = []  # token ids the client has from this call, across servers
        reported: Usage | None = None  # the last counts a server sent (its prompt's, at least)
        tried: list[str] = []
        failure: BackendError | None = None
        while len(tried) < self._max_attempts:
            resumed = (*request.resume_token_ids, *delivered)
            if delivered and len(resumed) >= request.max_tokens:
                # The client has every token; only the server's end was lost with it. The prompt
                # is billed as the server counted it, else as the gateway did.
                prompt, cached = (
                    (reported.prompt_tokens, reported.cached_tokens) if reported else (request.prompt_tokens, 0)
                )
                yield GenerationDelta(finish_reason="length", usage=Usage(prompt, cached, len(delivered)))
                return
            server = self._picker.pick(request, tried)
            if server is None:
                break
            tried.append(server)
            attempt = replace(request, resume_token_ids=resumed)
            earlier = len(delivered)
            self._picker.started(server, attempt)
            failed = False  # a client that hangs up is no fault of the server
            try:
                async with contextlib.aclosing(self._streams.stream_on(server, attempt)) as deltas:
                    async for delta in deltas:
                        delivered.extend(delta.token_ids)
                        if delta.usage is not None:
                            reported = delta.usage
                        if delta.usage is not None and earlier:
                            usage = delta.usage
                            delta = replace(
                                delta, usage=replace(usage, completion_tokens=usage.completion_tokens + earlier)
                            )
                        yield delta
                        if delta.finish_reason is not None:
                            return
                raise BackendError(f"server {server!r}: the stream ended without a finish reason")
            except RequestRejected:
                raise  # the caller's input: every server would refuse it, and this one is fine
            except BackendError as exc:
                failure, failed = exc, True
                logger.warning(
                    "server failed a request; trying another",
                    extra={"request_id": request.request_id, "server": server, "tokens_sent": len(delivered),
                           "error": str(exc)},
                )  # fmt: skip
            finally:
                self._picker.ended(server, attempt, failed)
        if failure is None:
            raise BackendUnavailable(
                f"no server of model {request.model_id!r} is ready", retry_after_s=self._retry_after_s
            )
        message = f"{len(tried)} servers failed this request; the last: {failure}"
        if not delivered:
            raise BackendUnavailable(message, retry_after_s=self._retry_after_s) from failure
        raise BackendError(f"{message} ({len(delivered)} tokens were sent)") from failure

    async def cancel(self, request_id: str) -> bool:
        return await self._streams.cancel(request_id)

    async def readiness(self) -> list[PoolReadiness]:
        return await self._picker.readiness()

    def predicted_ttft_s(self, model_id: str, request_tokens: int, prefix_block_hashes: Sequence[int]) -> float | None:
        return self._picker.predicted_ttft_s(model_id, request_tokens, prefix_block_hashes)

    async def close(self) -> None:
        if self._on_close is not None:
            await self._on_close()
        await self._streams.close()
