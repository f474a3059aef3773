"""A fake of TensorRT-LLM's LLM API (`generate_async`, `get_stats_async`), for the trtllm tests.

Only what `trtllm.engine_loop` relies on, as TensorRT-LLM 1.x does it:

    generate_async(inputs, sampling_params, streaming=True, **extra) -> FakeGeneration
        `async for` yields the same object after every step, updated in place:
        `.outputs[0].token_ids` is the whole completion so far; the end is `.finished` with
        `.outputs[0].finish_reason` "length" (max_tokens), "stop" (end_id unless ignore_eos,
        or a stop token id; the stop token itself is not part of the reply), "cancelled"
        (after `abort()`).
    get_stats_async(timeout) -> the records a test queued with `add_stats`, then the end.

Tokens come from `next_token(context)` (default: last + 1, modulo the vocabulary), where the
context is the inputs and the completion so far. Ungated, a generation makes a step per event
loop turn; gated, it waits for `allow(n)` (from any thread), so a test decides exactly how far
it gets before it cancels, fails it, or lets it finish.

`sampling_params` is whatever the loop's factory made: the tests pass `dict`, so it is the
keyword arguments themselves.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_S = 10.0


def echo_next_token(context: list[int], vocab_size: int) -> int:
    return (context[-1] + 1) % vocab_size


@dataclass(slots=True)
class FakeCompletion:
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


class FakeGeneration:
    """One request in the fake LLM; lives on the event loop that called `generate_async`."""

    def __init__(self, llm: FakeLLM, inputs: list[int], sampling: dict[str, Any], extra: dict[str, Any]) -> None:
        self.inputs = list(inputs)
        self.sampling = sampling
        self.extra = extra
        self.outputs = [FakeCompletion()]
        self.finished = False
        self.aborted = False
        if llm.cached_tokens is not None:
            self.cached_tokens = llm.cached_tokens
        self._llm = llm
        self._loop = asyncio.get_running_loop()
        self._permits = 0
        self._error: Exception | None = None
        self._changed = asyncio.Event()

    # --- what the engine loop calls (on its event loop) ---------------------------------------

    def abort(self) -> None:
        self.aborted = True
        self._changed.set()

    def __aiter__(self) -> AsyncIterator[FakeGeneration]:
        return self._steps()

    # --- what a test calls (any thread) -------------------------------------------------------

    def allow(self, steps: int = 1) -> None:
        """Let a gated generation make `steps` more steps."""
        self._loop.call_soon_threadsafe(self._add_permits, steps)

    def fail(self, error: Exception) -> None:
        """The next step raises `error` (as a broken executor would)."""
        self._loop.call_soon_threadsafe(self._set_error, error)

    # --- the steps ----------------------------------------------------------------------------

    def _add_permits(self, steps: int) -> None:
        self._permits += steps
        self._changed.set()

    def _set_error(self, error: Exception) -> None:
        self._error = error
        self._changed.set()

    async def _next_step(self) -> None:
        if not self._llm.gated:
            await asyncio.sleep(0)
            return
        while self._permits == 0 and not self.aborted and self._error is None:
            self._changed.clear()
            await self._changed.wait()
        if self._permits:
            self._permits -= 1

    async def _steps(self) -> AsyncIterator[FakeGeneration]:
        completion = self.outputs[0]
        end_id = self.sampling["end_id"]
        stop_ids = set(self.sampling.get("stop_token_ids", ()))
        while not self.finished:
            await self._next_step()
            if self._error is not None:
                raise self._error
            if self.aborted:
                self._end("cancelled")
            for _ in range(self._llm.tokens_per_step):
                if self.finished:
                    break
                token = self._llm.next_token([*self.inputs, *completion.token_ids])
                if (token == end_id and not self.sampling["ignore_eos"]) or token in stop_ids:
                    self._end("stop")
                    break
                completion.token_ids.append(token)
                if len(completion.token_ids) >= self.sampling["max_tokens"]:
                    self._end("length")
            yield self

    def _end(self, reason: str) -> None:
        self.outputs[0].finish_reason = reason
        self.finished = True


class FakeLLM:
    """Records every `generate_async` call; serves the stats records a test queues."""

    def __init__(
        self,
        *,
        vocab_size: int = 1000,
        next_token: Callable[[list[int]], int] | None = None,
        gated: bool = False,
        tokens_per_step: int = 1,
        cached_tokens: int | None = None,
        submit_error: Exception | None = None,
    ) -> None:
        self.next_token = next_token or (lambda context: echo_next_token(context, vocab_size))
        self.gated = gated
        self.tokens_per_step = tokens_per_step
        self.cached_tokens = cached_tokens
        self.submit_error = submit_error
        self.shut_down = False
        self.stats_consumed = 0
        self._calls: list[FakeGeneration] = []
        self._stats_records: deque[str | Mapping[str, Any]] = deque()
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- the LLM API ----------------------------------------------------------------------------

    def generate_async(
        self, inputs: list[int], sampling_params: Any = None, *, streaming: bool = False, **kwargs: Any
    ) -> FakeGeneration:
        assert streaming, "the engine loop streams"
        self._note_loop()
        if self.submit_error is not None:
            raise self.submit_error
        generation = FakeGeneration(self, inputs, dict(sampling_params), kwargs)
        with self._cond:
            self._calls.append(generation)
            self._cond.notify_all()
        return generation

    def get_stats_async(self, timeout: float = 2.0) -> AsyncIterator[str | Mapping[str, Any]]:
        self._note_loop()
        return self._stats()

    def shutdown(self) -> None:
        self.shut_down = True

    # --- for tests ----------------------------------------------------------------------------

    @property
    def calls(self) -> list[FakeGeneration]:
        with self._cond:
            return list(self._calls)

    def wait_for_calls(self, count: int) -> list[FakeGeneration]:
        """The first `count` generations, once that many were started."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self._calls) >= count, TIMEOUT_S), f"{len(self._calls)} calls"
            return self._calls[:count]

    def add_stats(self, *records: str | Mapping[str, Any]) -> None:
        with self._cond:
            self._stats_records.extend(records)

    def wait_stats_consumed(self, count: int) -> None:
        """Until the engine loop has taken (and stored) `count` records in all."""
        with self._cond:
            assert self._cond.wait_for(lambda: self.stats_consumed >= count, TIMEOUT_S), "stats not read"

    def settle(self) -> None:
        """Until the event loop running the LLM's calls has done what was queued on it so far
        (and the steps of the tasks that started), so a test can assert that nothing happened."""
        with self._cond:
            assert self._cond.wait_for(lambda: self._loop is not None, TIMEOUT_S), "the LLM was never called"
            loop = self._loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(_two_turns(), loop).result(TIMEOUT_S)

    def _note_loop(self) -> None:
        with self._cond:
            self._loop = asyncio.get_running_loop()
            self._cond.notify_all()

    async def _stats(self) -> AsyncIterator[str | Mapping[str, Any]]:
        while True:
            with self._cond:
                if not self._stats_records:
                    return
                record = self._stats_records.popleft()
            yield record
            # Resumed for the next record: the loop has stored this one.
            with self._cond:
                self.stats_consumed += 1
                self._cond.notify_all()


async def _two_turns() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
