"""The engine inside `llm`'s process: outputs reach the pipeline in memory, paced and merged
by the same EngineHost, and a reply closed early cancels its request and waits for its end."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from bls.engine_host import EngineHost
from bls.in_process_engine import InProcessEngine
from bls.tensors import InputError
from engine.request import EngineRequest, FinishReason, RequestOutput, SamplingParams
from tests.bls.test_engine_host import FakeLoop, out


def request(rid: str = "r1") -> EngineRequest:
    return EngineRequest(rid, (1, 2, 3), SamplingParams(max_tokens=4))


@pytest.fixture
def host_and_loop() -> tuple[EngineHost, FakeLoop]:
    loop = FakeLoop()
    host = EngineHost(loop, None, cancel_poll_s=0.05)
    host.start()
    yield host, loop
    host.stop(timeout=5)


async def _stream(loop: FakeLoop, rid: str) -> object:
    for _ in range(500):
        if rid in loop.streams:
            return loop.streams[rid]
        await asyncio.sleep(0.01)
    raise AssertionError(f"{rid} never reached the engine")


async def test_outputs_arrive_in_order_and_the_last_ends_the_reply(host_and_loop: tuple[EngineHost, FakeLoop]) -> None:
    host, loop = host_and_loop
    engine = InProcessEngine(host)
    received: list[RequestOutput] = []

    async def read() -> None:
        async with contextlib.aclosing(engine.generate(request())) as outputs:
            async for output in outputs:
                received.append(output)

    reader = asyncio.create_task(read())
    stream = await _stream(loop, "r1")
    stream.push(out("r1", (5,), done=1))
    stream.push(out("r1", (6,), done=2))
    stream.push(out("r1", (7,), FinishReason.LENGTH, done=3))
    await asyncio.wait_for(reader, 30)
    assert [t for o in received for t in o.new_token_ids] == [5, 6, 7]
    assert received[-1].finished and received[-1].finish_reason is FinishReason.LENGTH
    assert all(not o.finished for o in received[:-1])
    assert host.active_request_ids == []


async def test_closing_early_cancels_and_waits_for_the_engine_s_end(host_and_loop: tuple[EngineHost, FakeLoop]) -> None:
    host, loop = host_and_loop
    engine = InProcessEngine(host)
    outputs = engine.generate(request())
    first = asyncio.create_task(outputs.__anext__())
    stream = await _stream(loop, "r1")
    stream.push(out("r1", (5,), done=1))
    assert (await asyncio.wait_for(first, 30)).new_token_ids == (5,)
    closing = asyncio.create_task(outputs.aclose())
    for _ in range(500):  # the close asked the engine to cancel...
        if loop.cancelled:
            break
        await asyncio.sleep(0.01)
    assert loop.cancelled == ["r1"]
    assert not closing.done()  # ...and waits for its last output
    stream.push(out("r1", (), FinishReason.CANCELLED, done=1))
    await asyncio.wait_for(closing, 30)
    assert host.active_request_ids == []


async def test_a_running_id_is_refused_and_a_cancel_reaches_the_engine(
    host_and_loop: tuple[EngineHost, FakeLoop],
) -> None:
    host, loop = host_and_loop
    engine = InProcessEngine(host)
    outputs = engine.generate(request())
    first = asyncio.create_task(outputs.__anext__())
    stream = await _stream(loop, "r1")
    with pytest.raises(InputError, match=r"^cpu_engine: .*already running"):
        await engine.generate(request()).__anext__()
    await engine.cancel("r1")
    assert loop.cancelled == ["r1"]
    stream.push(out("r1", (), FinishReason.CANCELLED, done=0))
    assert (await asyncio.wait_for(first, 30)).finish_reason is FinishReason.CANCELLED
    await outputs.aclose()
