"""EngineHost with a fake engine loop (real RequestStreams) and recording sinks."""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bls.engine_host import EngineHost
from bls.engine_tensors import cancel_request_tensors, engine_request_tensors
from bls.tensors import DictTensorSource, Outputs, int32_scalar
from contracts.latency_log import LatencyLog
from engine.engine_loop import RequestStream
from engine.request import EngineRequest, FinishReason, RequestOutput, SamplingParams
from engine.stats import EngineStats

STATS = EngineStats(10, 8, 2, 16, 0, 1, 4, 1, 0, 0)


class FakeLoop:
    def __init__(self) -> None:
        self.streams: dict[str, RequestStream] = {}
        self.cancelled: list[str] = []
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self, timeout: float) -> None:
        self.stopped = True

    def submit(self, request: EngineRequest, notify: Callable[[], None] | None = None) -> RequestStream:
        stream = RequestStream(request.request_id, notify)
        self.streams[request.request_id] = stream
        return stream

    def cancel(self, request_id: str) -> None:
        self.cancelled.append(request_id)

    def stats(self) -> EngineStats:
        return STATS


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[Outputs | None, bool, str | None]] = []
        self.cancelled = False
        self.fail = fail
        self.event = threading.Event()

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        if self.fail:
            raise RuntimeError("client gone")
        self.sent.append((outputs, final, error))
        self.event.set()

    def is_cancelled(self) -> bool:
        return self.cancelled

    def tokens(self) -> list[list[int]]:
        return [list(o["output_token_ids"]) for o, _, _ in self.sent if o is not None]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Publisher:
    def __init__(self) -> None:
        self.published: list[EngineStats] = []
        self.heartbeats: list[float] = []

    def publish(self, stats: EngineStats) -> None:
        self.published.append(stats)

    def heartbeat(self, unix_time: float) -> None:
        self.heartbeats.append(unix_time)


def request_inputs(max_tokens: int = 4) -> DictTensorSource:
    request = EngineRequest("x", (1, 2, 3), SamplingParams(max_tokens=max_tokens))
    return DictTensorSource(engine_request_tensors(request))


def out(rid: str, ids: tuple[int, ...], reason: FinishReason | None = None, done: int = 0) -> RequestOutput:
    return RequestOutput(rid, ids, reason is not None, reason, 3, 0, done)


def make_host() -> tuple[EngineHost, FakeLoop, Clock, Publisher]:
    loop, clock, publisher = FakeLoop(), Clock(), Publisher()
    return (
        EngineHost(loop, publisher, cancel_poll_s=0.05, clock=clock),
        loop,
        clock,
        publisher,
    )


def test_steps_are_coalesced_into_one_response_and_final_ends_the_request() -> None:
    host, loop, _, _ = make_host()
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    stream = loop.streams["r1"]
    stream.push(out("r1", (5,), done=1))
    stream.push(out("r1", (6,), done=2))
    host.pump()
    stream.push(out("r1", (7,), FinishReason.LENGTH, done=3))
    host.pump()
    host.pump()
    assert sink.tokens() == [[5, 6], [7]]
    assert [final for _, final, _ in sink.sent] == [False, True]
    last = sink.sent[-1][0]
    assert last is not None and last["finish_reason"][0] == b"length"
    assert int(last["completion_tokens"][0]) == 3
    assert host.active_request_ids == []


def test_stream_interval_holds_back_middle_deltas_but_never_the_first_or_the_last() -> None:
    loop, clock = FakeLoop(), Clock()
    host = EngineHost(loop, None, stream_interval_s=0.04, clock=clock)
    sink = Sink()
    host.handle("r1", request_inputs(max_tokens=5), sink)
    stream = loop.streams["r1"]
    stream.push(out("r1", (5,), done=1))
    host.pump()  # t=0: the first token goes out at once
    clock.now = 0.01
    stream.push(out("r1", (6,), done=2))
    host.pump()
    clock.now = 0.03
    stream.push(out("r1", (7,), done=3))
    host.pump()  # still inside the interval: held back, merging
    assert sink.tokens() == [[5]]
    clock.now = 0.045
    host.pump()
    assert sink.tokens() == [[5], [6, 7]]
    clock.now = 0.05
    stream.push(out("r1", (8,), FinishReason.LENGTH, done=4))
    host.pump()  # the end is never held back
    assert sink.tokens() == [[5], [6, 7], [8]]
    assert sink.sent[-1][1] is True


def test_interval_stretches_with_active_replies_to_bound_the_response_rate() -> None:
    loop, clock = FakeLoop(), Clock()
    host = EngineHost(loop, None, stream_interval_s=0.01, max_responses_per_s=100, clock=clock)
    sinks = [Sink() for _ in range(4)]
    for i, sink in enumerate(sinks):
        host.handle(f"r{i}", request_inputs(max_tokens=9), sink)
    for i in range(4):
        loop.streams[f"r{i}"].push(out(f"r{i}", (1,), done=1))
    host.pump()  # first tokens go out at once
    for i in range(4):
        loop.streams[f"r{i}"].push(out(f"r{i}", (2,), done=2))
    clock.now = 0.03  # past 10 ms, but 4 replies at 100 responses/s means 40 ms apart
    host.pump()
    assert [s.tokens() for s in sinks] == [[[1]]] * 4
    clock.now = 0.041
    host.pump()
    assert [s.tokens() for s in sinks] == [[[1], [2]]] * 4


def test_client_cancellation_is_polled_and_forwarded_once() -> None:
    host, loop, clock, _ = make_host()
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    host.pump()
    sink.cancelled = True
    host.pump()  # within the poll interval: not asked yet
    assert loop.cancelled == []
    clock.now = 0.06
    host.pump()
    clock.now = 0.2
    host.pump()
    assert loop.cancelled == ["r1"]


def test_control_request_cancels_a_running_request() -> None:
    host, loop, _, _ = make_host()
    host.handle("r1", request_inputs(), Sink())
    control = Sink()
    host.handle("c1", DictTensorSource(cancel_request_tensors("r1")), control)
    assert loop.cancelled == ["r1"]
    assert control.sent == [(None, True, None)]


def test_cancel_that_overtakes_its_request_still_wins() -> None:
    host, loop, _, _ = make_host()
    host.handle("c1", DictTensorSource(cancel_request_tensors("r1")), Sink())
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    assert "r1" not in loop.streams
    ((outputs, final, error),) = sink.sent
    assert final and error is None and outputs is not None
    assert outputs["finish_reason"][0] == b"cancelled"


def test_late_cancel_does_not_hit_a_later_request_with_the_same_id() -> None:
    host, loop, _, _ = make_host()
    host.handle("r1", request_inputs(), Sink())
    loop.streams["r1"].push(out("r1", (5,), FinishReason.STOP, done=1))
    host.pump()
    host.handle("c1", DictTensorSource(cancel_request_tensors("r1")), Sink())  # too late
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    assert sink.sent == []
    assert "r1" in host.active_request_ids


def test_bad_input_and_duplicate_id_are_errors_with_final() -> None:
    host, _, _, _ = make_host()
    bad = Sink()
    host.handle(
        "r1",
        DictTensorSource({"input_ids": np.array([1], dtype=np.int32), "max_tokens": int32_scalar(0)}),
        bad,
    )
    # A refusal of the input, marked so that `llm` and the gateway tell it from a failure.
    assert bad.sent == [(None, True, "invalid input: max_tokens must be at least 1, got 0")]
    host.handle("r2", request_inputs(), Sink())
    dup = Sink()
    host.handle("r2", request_inputs(), dup)
    assert dup.sent[0][1] is True and "already running" in str(dup.sent[0][2])


def test_failed_send_cancels_the_request_in_the_engine() -> None:
    host, loop, _, _ = make_host()
    host.handle("r1", request_inputs(), Sink(fail=True))
    loop.streams["r1"].push(out("r1", (5,), done=1))
    host.pump()
    assert loop.cancelled == ["r1"]
    assert host.active_request_ids == []


def test_metrics_are_published_before_the_outputs_of_a_pass() -> None:
    host, loop, _, publisher = make_host()
    sink = Sink()
    sink.send = lambda outputs, *, final, error=None: sink.sent.append((outputs, len(publisher.published)))  # type: ignore[method-assign,assignment]
    host.handle("r1", request_inputs(), sink)
    loop.streams["r1"].push(out("r1", (5,), done=1))
    host.pump()
    assert publisher.published == [STATS]
    assert sink.sent[0][1] == 1  # published when the first output went out


def test_stop_sends_final_to_everything_still_open() -> None:
    host, loop, _, _ = make_host()
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    host.stop(timeout=1.0)
    assert loop.stopped
    outputs, final, _ = sink.sent[-1]
    assert final and outputs is not None and outputs["finish_reason"][0] == b"aborted"


def test_stop_lets_go_of_the_publisher_so_triton_frees_its_metric_families_in_finalize() -> None:
    """A `pb_utils.MetricFamily` still alive when the stub tears down is freed after the stub's
    shared memory and crashes it (SIGSEGV in Metric::SaveToSharedMemory, on every stop)."""
    loop, publisher = FakeLoop(), Publisher()
    host = EngineHost(loop, publisher)
    freed = weakref.ref(publisher)
    del publisher
    host.start()
    host.stop(timeout=1.0)
    assert freed() is None
    host.pump()  # a pass after stop publishes nothing and does not fail


def test_sender_thread_wakes_on_engine_output() -> None:
    host, loop, _, _ = make_host()
    host.start()
    try:
        sink = Sink()
        host.handle("r1", request_inputs(), sink)
        loop.streams["r1"].push(out("r1", (9,), FinishReason.STOP, done=1))
        assert sink.event.wait(2.0)
        assert sink.tokens() == [[9]]
    finally:
        host.stop(timeout=1.0)


def test_heartbeat_is_the_wall_clock_at_most_every_interval() -> None:
    loop, clock, publisher = FakeLoop(), Clock(), Publisher()
    wall = iter([1000.0, 1000.5, 1001.0])
    host = EngineHost(loop, publisher, heartbeat_interval_s=0.1, clock=clock, wall_clock=lambda: next(wall))
    host.pump()  # t=0: beats
    clock.now = 0.05
    host.pump()  # too soon: stats only
    clock.now = 0.1
    host.pump()
    clock.now = 0.3
    host.pump()
    assert publisher.heartbeats == [1000.0, 1000.5, 1001.0]
    assert len(publisher.published) == 4


def test_an_idle_host_keeps_beating() -> None:
    """Nothing runs and nothing wakes the sender: its own poll still makes passes, so a
    supervisor sees the heartbeat advance while the stub lives."""
    loop, publisher = FakeLoop(), Publisher()
    host = EngineHost(loop, publisher)  # the defaults model.py uses
    host.start()
    try:
        time.sleep(0.7)
    finally:
        host.stop(timeout=1.0)
    assert len(publisher.heartbeats) >= 3  # a pass every cancel_poll_s (0.2 s)
    assert publisher.heartbeats == sorted(publisher.heartbeats)


def test_with_a_latency_log_each_request_ends_with_one_line_of_its_stamps(tmp_path: Path) -> None:
    loop = FakeLoop()
    wall = iter([100.0, 101.0])
    log = LatencyLog(tmp_path / "latency.jsonl")
    host = EngineHost(loop, None, cancel_poll_s=0.05, clock=Clock(), wall_clock=lambda: next(wall), latency_log=log)
    sink = Sink()
    host.handle("r1", request_inputs(), sink)
    stream = loop.streams["r1"]
    stream.times.added, stream.times.first_step_started, stream.times.first_token = 10.0, 11.0, 12.0
    stream.push(out("r1", (5,), done=1))
    host.pump()
    stream.times.finished = 13.0
    stream.push(out("r1", (6,), FinishReason.LENGTH, done=2))
    host.pump()
    log.close()
    (line,) = (tmp_path / "latency.jsonl").read_text().splitlines()
    marks = json.loads(line)
    assert marks["hop"] == "cpu_engine" and marks["request_id"] == "r1" and marks["max_tokens"] == 4
    assert (marks["added"], marks["first_step_started"], marks["first_token"]) == (10.0, 11.0, 12.0)
    assert (marks["first_sent"], marks["finished"], marks["final_sent"]) == (100.0, 13.0, 101.0)
    assert marks["submitted"] == stream.times.submitted
