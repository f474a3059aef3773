"""FailoverBackend's failover and resume against scripted servers (fakes of the picker and the
streams: the real ones are tested on their own and end to end)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Collection
from dataclasses import replace

import pytest

from contracts.generation import (
    BackendError,
    BackendUnavailable,
    GenerationDelta,
    GenerationRequest,
    PoolReadiness,
    RequestRejected,
    Usage,
)
from router.failover_backend import FailoverBackend

REQUEST = GenerationRequest(request_id="r1", model_id="small", prompt="the fox", max_tokens=6)


class Picker:
    def __init__(self, servers: list[str]) -> None:
        self.servers = servers
        self.log: list[tuple[str, str, tuple[int, ...], bool | None]] = []

    def pick(self, request: GenerationRequest, exclude: Collection[str]) -> str | None:
        return next((s for s in self.servers if s not in exclude), None)

    def started(self, server_id: str, request: GenerationRequest) -> None:
        self.log.append(("started", server_id, request.resume_token_ids, None))

    def ended(self, server_id: str, request: GenerationRequest, failed: bool) -> None:
        self.log.append(("ended", server_id, request.resume_token_ids, failed))

    async def readiness(self) -> list[PoolReadiness]:
        return [PoolReadiness("small", "small", bool(self.servers))]


class Servers:
    """Each server writes tokens 10, 11, 12, ... continuing after the resumed ones (as a greedy
    engine would), and may die after `dies_after` deltas."""

    def __init__(self, dies_after: dict[str, int]) -> None:
        self.dies_after = dies_after
        self.asked: list[tuple[str, tuple[int, ...]]] = []

    async def stream_on(self, server_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]:
        self.asked.append((server_id, request.resume_token_ids))
        start = len(request.resume_token_ids)
        for sent, index in enumerate(range(start, request.max_tokens)):
            if self.dies_after.get(server_id) == sent:
                raise BackendError(f"{server_id} died")
            last = index == request.max_tokens - 1
            usage = Usage(prompt_tokens=3, completion_tokens=sent + 1)
            yield GenerationDelta(f"t{index} ", (10 + index,), "length" if last else None, usage)

    async def cancel(self, request_id: str) -> bool:
        return False

    async def close(self) -> None:
        pass


async def reply(backend: FailoverBackend, request: GenerationRequest = REQUEST) -> list[GenerationDelta]:
    return [delta async for delta in backend.generate(request)]


async def test_one_server_streams_the_whole_reply() -> None:
    deltas = await reply(FailoverBackend(Picker(["a"]), Servers({})))
    assert "".join(d.text for d in deltas) == "t0 t1 t2 t3 t4 t5 "
    assert deltas[-1].finish_reason == "length" and deltas[-1].usage == Usage(3, 0, 6)


async def test_a_server_dying_mid_reply_is_resumed_elsewhere_with_nothing_lost_or_repeated() -> None:
    picker, servers = Picker(["a", "b"]), Servers({"a": 2})
    deltas = await reply(FailoverBackend(picker, servers))
    assert [t for d in deltas for t in d.token_ids] == [10, 11, 12, 13, 14, 15]
    assert "".join(d.text for d in deltas) == "t0 t1 t2 t3 t4 t5 "
    assert servers.asked == [("a", ()), ("b", (10, 11))]
    assert deltas[-1].usage == Usage(3, 0, 6)  # 2 from a + 4 from b: each token once
    assert picker.log == [("started", "a", (), None), ("ended", "a", (), True),
                          ("started", "b", (10, 11), None), ("ended", "b", (10, 11), False)]  # fmt: skip


async def test_a_failure_before_the_first_token_is_invisible() -> None:
    servers = Servers({"a": 0})
    deltas = await reply(FailoverBackend(Picker(["a", "b"]), servers))
    assert len(deltas) == 6 and servers.asked == [("a", ()), ("b", ())]


async def test_attempts_are_bounded_and_say_so() -> None:
    with pytest.raises(BackendUnavailable, match="3 servers failed"):  # nothing sent yet: retryable
        await reply(FailoverBackend(Picker(["a", "b", "c", "d"]), Servers({"a": 0, "b": 0, "c": 0})))
    received: list[GenerationDelta] = []
    with pytest.raises(BackendError, match=r"2 servers failed.*\(2 tokens were sent\)"):
        async for delta in FailoverBackend(Picker(["a", "b"]), Servers({"a": 1, "b": 1})).generate(REQUEST):
            received.append(delta)
    assert [t for d in received for t in d.token_ids] == [10, 11]


async def test_no_ready_server_is_a_503() -> None:
    with pytest.raises(BackendUnavailable, match="no server of model 'small' is ready") as refused:
        await reply(FailoverBackend(Picker([]), Servers({}), retry_after_s=7))
    assert refused.value.retry_after_s == 7


async def test_a_reply_whose_end_was_lost_with_its_server_ends_without_another_server() -> None:
    servers = Servers({"a": 6})  # every token sent, then the stream broke before its end

    async def all_but_the_end(server_id: str, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        async for delta in Servers({}).stream_on(server_id, request):
            yield replace(delta, finish_reason=None)
            if delta.finish_reason:
                raise BackendError("died at the end")

    servers.stream_on = all_but_the_end  # type: ignore[method-assign]
    deltas = await reply(FailoverBackend(Picker(["a", "b"]), servers))
    assert [t for d in deltas for t in d.token_ids] == [10, 11, 12, 13, 14, 15]
    # Billed whole: the prompt as the server counted it, every token once.
    assert deltas[-1].finish_reason == "length" and deltas[-1].usage == Usage(3, 0, 6)


class Refusing(Servers):
    """Every server refuses the request's input, as every `llm` would."""

    async def stream_on(self, server_id: str, request: GenerationRequest) -> AsyncGenerator[GenerationDelta, None]:
        self.asked.append((server_id, request.resume_token_ids))
        raise RequestRejected("top_p must be in (0, 1], got 0.0")
        yield GenerationDelta()  # pragma: no cover - makes this a generator


async def test_a_refused_input_tries_no_other_server_and_marks_none_failed() -> None:
    picker, servers = Picker(["a", "b", "c"]), Refusing({})
    with pytest.raises(RequestRejected, match="top_p"):
        await reply(FailoverBackend(picker, servers))
    assert servers.asked == [("a", ())]
    assert picker.log == [("started", "a", (), None), ("ended", "a", (), False)]
