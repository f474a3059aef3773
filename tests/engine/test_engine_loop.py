"""EngineLoop: a step thread behind thread-safe streams; merging, notify, cancel, stop, errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.engine_loop import EngineLoop, RequestStream, merge_outputs
from engine.llm_engine import LLMEngine
from engine.request import FinishReason, RequestOutput

TIMEOUT_S = 10.0


@pytest.fixture
def make_loop(make_config: Callable[..., EngineConfig], make_model: Any) -> Iterator[Callable[..., EngineLoop]]:
    loops: list[EngineLoop] = []

    def build(start: bool = True, step_delay_s: float = 0.0) -> EngineLoop:
        config = make_config(kv_capacity_tokens=16_384, block_size=16)
        model = make_model(config.num_blocks, config.block_size)
        if step_delay_s:
            forward = model.forward

            def slow_forward(chunks: Any) -> Any:
                time.sleep(step_delay_s)
                return forward(chunks)

            model.forward = slow_forward
        loop = EngineLoop(LLMEngine(config, model))
        loops.append(loop)
        if start:
            loop.start()
        return loop

    yield build
    for loop in loops:
        loop.stop(TIMEOUT_S)


def read_to_end(stream: RequestStream) -> list[RequestOutput]:
    outputs = []
    deadline = time.monotonic() + TIMEOUT_S
    while not outputs or not outputs[-1].finished:
        assert time.monotonic() < deadline, "stream did not finish"
        output = stream.wait(timeout=TIMEOUT_S)
        if output is not None:
            outputs.append(output)
    return outputs


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.001)


def test_merge_outputs_concatenates_deltas_and_keeps_latest_totals() -> None:
    older = RequestOutput("r", (4, 5), False, None, 3, 0, 2)
    newer = RequestOutput("r", (6,), True, FinishReason.STOP, 3, 0, 3)
    assert merge_outputs(older, newer) == RequestOutput("r", (4, 5, 6), True, FinishReason.STOP, 3, 0, 3)


def test_a_submitted_request_streams_to_its_end(make_loop: Any, make_request: Any) -> None:
    loop = make_loop()
    outputs = read_to_end(loop.submit(make_request("r", [1, 2, 3], max_tokens=5)))
    assert [t for o in outputs for t in o.new_token_ids] == [4, 5, 6, 7, 8]
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    assert outputs[-1].completion_tokens == 5


def test_a_slow_reader_gets_one_merged_output(make_loop: Any, make_request: Any) -> None:
    loop = make_loop()
    stream = loop.submit(make_request("r", [1, 2, 3], max_tokens=5))
    wait_until(lambda: stream.finished)
    assert stream.drain() == RequestOutput("r", (4, 5, 6, 7, 8), True, FinishReason.LENGTH, 3, 0, 5)
    assert stream.drain() is None
    assert stream.wait(timeout=0.01) is None


def test_notify_runs_on_the_engine_thread(make_loop: Any, make_request: Any) -> None:
    threads: list[str] = []
    loop = make_loop()
    stream = loop.submit(
        make_request("r", [1, 2], max_tokens=3),
        notify=lambda: threads.append(threading.current_thread().name),
    )
    read_to_end(stream)
    assert threads and set(threads) == {"engine-step"}


def test_a_step_notifies_each_callback_once_after_all_its_outputs(make_loop: Any, make_request: Any) -> None:
    # A host serving every stream passes one callback: it is woken once a step, and then finds
    # every output of that step already pushed (issue 41: one wake per step, not per output).
    loop = make_loop(start=False)
    streams: list[RequestStream] = []
    seen: list[list[int]] = []  # per notify: how many tokens each stream had pending

    def wake() -> None:
        drained = [stream.drain() for stream in streams]
        seen.append([0 if o is None else len(o.new_token_ids) for o in drained])

    for i in range(4):
        streams.append(loop.submit(make_request(f"r{i}", [1, 2, 3], max_tokens=3, ignore_eos=True), notify=wake))
    loop.start()
    wait_until(lambda: all(stream.finished for stream in streams))
    assert seen == [[1, 1, 1, 1]] * 3  # three steps of four outputs: three wakes, not twelve


def test_cancel_ends_a_running_request(make_loop: Any, make_request: Any) -> None:
    loop = make_loop(step_delay_s=0.002)
    stream = loop.submit(make_request("r", [1, 2], max_tokens=5000, ignore_eos=True))
    first = stream.wait(timeout=TIMEOUT_S)
    assert first is not None and not first.finished
    loop.cancel("r")
    loop.cancel("unknown")  # ignored
    outputs = read_to_end(stream)
    assert outputs[-1].finish_reason is FinishReason.CANCELLED
    wait_until(lambda: loop.stats().active_requests == 0)
    assert loop.stats().used_blocks == 0


def test_stop_aborts_unfinished_requests_and_refuses_new_ones(make_loop: Any, make_request: Any) -> None:
    loop = make_loop(step_delay_s=0.002)
    stream = loop.submit(make_request("r", [1, 2], max_tokens=5000, ignore_eos=True))
    assert stream.wait(timeout=TIMEOUT_S) is not None
    loop.stop(TIMEOUT_S)
    outputs = read_to_end(stream)
    assert outputs[-1].finish_reason is FinishReason.ABORTED
    with pytest.raises(RuntimeError, match="stopped"):
        loop.submit(make_request("late", [1]))


def test_stop_before_start_aborts_what_was_submitted(make_loop: Any, make_request: Any) -> None:
    loop = make_loop(start=False)
    stream = loop.submit(make_request("r", [1, 2]))
    loop.stop(TIMEOUT_S)
    assert stream.drain() == RequestOutput("r", (), True, FinishReason.ABORTED, 2, 0, 0)


def test_a_model_error_aborts_its_step_and_the_loop_keeps_serving(make_loop: Any, make_request: Any) -> None:
    loop = make_loop(start=False)
    loop._engine.model.fail_next = True  # the first forward raises
    failed = loop.submit(make_request("a", [1, 2], max_tokens=3))
    loop.start()
    assert read_to_end(failed)[-1].finish_reason is FinishReason.ABORTED
    outputs = read_to_end(loop.submit(make_request("b", [1, 2], max_tokens=3)))
    assert [t for o in outputs for t in o.new_token_ids] == [3, 4, 5]


def test_submit_rejects_invalid_and_duplicate_requests(make_loop: Any, make_request: Any) -> None:
    loop = make_loop(step_delay_s=0.002)
    with pytest.raises(ValueError, match="prompt is empty"):
        loop.submit(make_request("empty", []))
    stream = loop.submit(make_request("r", [1, 2], max_tokens=5000, ignore_eos=True))
    with pytest.raises(ValueError, match="already running"):
        loop.submit(make_request("r", [1, 2]))
    loop.cancel("r")
    read_to_end(stream)
    read_to_end(loop.submit(make_request("r", [1, 2], max_tokens=1)))  # the id is free again


def test_idle_loop_sleeps_instead_of_stepping(make_loop: Any, make_request: Any, monkeypatch: Any) -> None:
    loop = make_loop()
    read_to_end(loop.submit(make_request("r", [1, 2], max_tokens=2)))
    steps = 0
    real_step = loop._engine.step

    def counting_step() -> list[RequestOutput]:
        nonlocal steps
        steps += 1
        return real_step()

    monkeypatch.setattr(loop._engine, "step", counting_step)
    time.sleep(0.05)
    assert steps == 0
    read_to_end(loop.submit(make_request("s", [1, 2], max_tokens=2)))
    assert steps == 2
    assert loop.stats().active_requests == 0


def test_a_request_is_stamped_at_each_stage_once_in_order(make_loop: Any, make_request: Any) -> None:
    loop = make_loop()
    stream = loop.submit(make_request("r", [1, 2, 3], max_tokens=5))
    read_to_end(stream)
    times = stream.times
    assert times.added is not None and times.first_step_started is not None
    assert times.first_token is not None and times.finished is not None
    assert times.submitted <= times.added <= times.first_step_started <= times.first_token <= times.finished
