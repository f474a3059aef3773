"""LlmApiEngineLoop over a fake LLM API: streaming, cancel, class priority, resume, stop
sequences, validation, failures, shutdown and stats; then behind the real EngineHost."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from bls.engine_host import EngineHost
from bls.engine_tensors import cancel_request_tensors, engine_request_tensors
from bls.tensors import DictTensorSource, Outputs
from engine.engine_loop import RequestStream
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams
from engine.stats import EngineStats
from tests.trtllm.fake_llm import FakeLLM
from trtllm.engine_loop import EngineLimits, LlmApiEngineLoop

TIMEOUT_S = 10.0
PRIORITY, INTERACTIVE, FLEX, BULK = RequestClass  # highest first
# Batch of 8: bulk leaves max(1, 8 // 8) = 1 slot to people when the executor has no priorities.
LIMITS = EngineLimits(
    vocab_size=1000, max_seq_len=64, max_batch_size=8, kv_tokens=4096, tokens_per_block=32, end_id=999
)
BATCH_OF_2 = replace(LIMITS, max_batch_size=2)  # bulk: 2 - max(1, 0) = 1 slot
GREEDY = {"end_id": 999, "max_tokens": 4, "ignore_eos": False, "detokenize": False, "top_k": 1}


@pytest.fixture
def make_loop() -> Iterator[Callable[..., LlmApiEngineLoop]]:
    loops: list[LlmApiEngineLoop] = []

    def build(
        llm: Any, limits: EngineLimits = LIMITS, *, with_priority: bool = False, start: bool = True
    ) -> LlmApiEngineLoop:
        loop = LlmApiEngineLoop(llm, dict, limits, with_priority=with_priority, stats_interval_s=0.01)
        loops.append(loop)
        if start:
            loop.start()
        return loop

    yield build
    for loop in loops:
        loop.stop(TIMEOUT_S)


def make_request(
    request_id: str,
    prompt: tuple[int, ...] = (1, 2, 3),
    max_tokens: int = 4,
    request_class: RequestClass = INTERACTIVE,
    resume: tuple[int, ...] = (),
    namespace: str = "",
    **sampling: Any,
) -> EngineRequest:
    return EngineRequest(
        request_id, prompt, SamplingParams(max_tokens=max_tokens, **sampling), request_class, resume, namespace
    )


def read_to_end(stream: RequestStream) -> list[RequestOutput]:
    outputs: list[RequestOutput] = []
    while not outputs or not outputs[-1].finished:
        output = stream.wait(TIMEOUT_S)
        assert output is not None, "the stream did not finish"
        outputs.append(output)
    return outputs


def read_tokens(stream: RequestStream, count: int) -> list[RequestOutput]:
    """Outputs until `count` tokens came (the stream merges, so possibly fewer outputs)."""
    outputs: list[RequestOutput] = []
    while sum(len(o.new_token_ids) for o in outputs) < count:
        output = stream.wait(TIMEOUT_S)
        assert output is not None and not output.finished, f"expected {count} tokens, got {outputs} {output}"
        outputs.append(output)
    return outputs


def reply(outputs: list[RequestOutput]) -> list[int]:
    return [t for o in outputs for t in o.new_token_ids]


def final_only(stream: RequestStream) -> RequestOutput:
    """The one output left on a stream that has ended (nothing comes after it)."""
    (output,) = read_to_end(stream)
    assert stream.drain() is None
    return output


# --- streaming ---------------------------------------------------------------------------------


def test_streamed_deltas_concatenate_to_the_reply_and_count_completion_tokens(make_loop: Any) -> None:
    llm = FakeLLM(cached_tokens=2)
    loop = make_loop(llm)
    outputs = read_to_end(loop.submit(make_request("r", (1, 2, 3), max_tokens=6)))
    assert reply(outputs) == [4, 5, 6, 7, 8, 9]
    assert [o.finished for o in outputs] == [False] * (len(outputs) - 1) + [True]
    assert outputs[-1] == RequestOutput("r", outputs[-1].new_token_ids, True, FinishReason.LENGTH, 3, 2, 6)
    running_totals = [sum(len(o.new_token_ids) for o in outputs[: i + 1]) for i in range(len(outputs))]
    assert [o.completion_tokens for o in outputs] == running_totals
    (call,) = llm.calls
    assert call.inputs == [1, 2, 3] and call.sampling == {**GREEDY, "max_tokens": 6} and call.extra == {}


def test_end_id_stops_the_reply_unless_ignore_eos(make_loop: Any) -> None:
    llm = FakeLLM()
    loop = make_loop(llm, replace(LIMITS, end_id=7))
    stopped = read_to_end(loop.submit(make_request("a", (4,), max_tokens=5)))
    assert reply(stopped) == [5, 6] and stopped[-1].finish_reason is FinishReason.STOP
    ignored = read_to_end(loop.submit(make_request("b", (4,), max_tokens=5, ignore_eos=True)))
    assert reply(ignored) == [5, 6, 7, 8, 9] and ignored[-1].finish_reason is FinishReason.LENGTH
    assert [(c.sampling["end_id"], c.sampling["ignore_eos"]) for c in llm.calls] == [(7, False), (7, True)]


def test_sampling_parameters_map_onto_the_llm_api(make_loop: Any) -> None:
    llm = FakeLLM()
    loop = make_loop(llm)
    request = make_request(
        "r",
        (1,),
        max_tokens=5,
        namespace="team-a",
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        seed=11,
        stop_token_ids=(3, 8),
        stop_token_sequences=((50, 51),),
    )
    outputs = read_to_end(loop.submit(request))
    assert reply(outputs) == [2] and outputs[-1].finish_reason is FinishReason.STOP  # 3 is a stop id
    (call,) = llm.calls
    assert call.sampling == {
        "end_id": 999,
        "max_tokens": 5,
        "ignore_eos": False,
        "detokenize": False,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 11,
        "stop_token_ids": [3, 8],
    }
    assert call.extra == {"cache_salt": "team-a"}


# --- cancellation ------------------------------------------------------------------------------


def test_cancel_mid_stream_ends_with_one_cancelled_output(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm)
    stream = loop.submit(make_request("r", (1, 2, 3), max_tokens=50))
    (generation,) = llm.wait_for_calls(1)
    generation.allow(2)
    assert reply(read_tokens(stream, 2)) == [4, 5]
    loop.cancel("r")
    assert final_only(stream) == RequestOutput("r", (), True, FinishReason.CANCELLED, 3, 0, 2)
    assert generation.aborted
    loop.cancel("r")  # finished: ignored
    loop.cancel("unknown")
    llm.settle()
    assert stream.drain() is None
    assert loop.stats().interactive_requests == 0


def test_cancel_before_the_request_starts_never_reaches_the_llm(make_loop: Any) -> None:
    llm = FakeLLM()
    loop = make_loop(llm, start=False)
    stream = loop.submit(make_request("r"))
    loop.cancel("r")  # queued behind the submit: the request is admitted, then cancelled
    loop.start()
    assert final_only(stream) == RequestOutput("r", (), True, FinishReason.CANCELLED, 3, 0, 0)
    llm.settle()
    assert llm.calls == []


# --- request classes ---------------------------------------------------------------------------


def test_with_priority_classes_go_to_the_llm_as_priorities_and_nothing_is_held(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm, with_priority=True)
    for i in range(9):
        loop.submit(make_request(f"b{i}", (i + 1,), request_class=BULK))
    loop.submit(make_request("f", (99,), request_class=FLEX))
    loop.submit(make_request("i", (100,)))
    loop.submit(make_request("p", (101,), request_class=PRIORITY))
    calls = llm.wait_for_calls(12)
    assert [c.extra["priority"] for c in calls] == [0.0] * 9 + [0.25, 0.75, 1.0]
    stats = loop.stats()
    assert stats.waiting_requests == 0
    assert stats.class_metrics() == {"priority": 1, "interactive": 1, "flex": 1, "bulk": 9}


def test_without_priority_bulk_is_held_while_it_would_take_the_room_people_need(make_loop: Any) -> None:
    """Batch 8, reserve 1: bulk goes in while bulk + interactive in the LLM < 7; interactive
    always goes in; held bulk starts oldest first as room appears, and counts as waiting."""
    llm = FakeLLM(gated=True)
    loop = make_loop(llm)
    bulk = [loop.submit(make_request(f"b{i}", (i + 1,), max_tokens=1, request_class=BULK)) for i in range(9)]
    llm.settle()
    started = llm.wait_for_calls(7)
    assert [c.inputs for c in llm.calls] == [[i + 1] for i in range(7)]
    assert all("priority" not in c.extra for c in started)
    stats = loop.stats()
    assert (stats.waiting_requests, stats.bulk_requests, stats.interactive_requests) == (2, 9, 0)

    person = loop.submit(make_request("i", (100,), max_tokens=1))
    llm.settle()
    assert [c.inputs for c in llm.calls[7:]] == [[100]]  # never held, though bulk filled its room

    started[0].allow()  # b0 ends, but with a person in the LLM there is still no room
    assert final_only(bulk[0]).finish_reason is FinishReason.LENGTH
    llm.settle()
    assert len(llm.calls) == 8 and loop.stats().waiting_requests == 2

    llm.calls[7].allow()  # the person's reply ends: one slot for bulk, the oldest held
    assert final_only(person).finish_reason is FinishReason.LENGTH
    llm.settle()
    assert [c.inputs for c in llm.calls[8:]] == [[8]]
    assert loop.stats().waiting_requests == 1

    started[1].allow()
    final_only(bulk[1])
    llm.settle()
    assert [c.inputs for c in llm.calls[8:]] == [[8], [9]]
    assert loop.stats().waiting_requests == 0


def test_without_priority_held_flex_goes_in_before_held_bulk_and_after_people(make_loop: Any) -> None:
    """Batch 2, reserve 1: one slot for flex and bulk together. Priority and interactive always
    go in; as room appears the held flex request starts before the bulk one that came first."""
    llm = FakeLLM(gated=True)
    loop = make_loop(llm, BATCH_OF_2)
    b0 = loop.submit(make_request("b0", (1,), max_tokens=1, request_class=BULK))
    b1 = loop.submit(make_request("b1", (2,), max_tokens=1, request_class=BULK))
    f0 = loop.submit(make_request("f0", (3,), max_tokens=1, request_class=FLEX))
    person = loop.submit(make_request("p", (4,), max_tokens=1, request_class=PRIORITY))
    llm.settle()
    assert [c.inputs for c in llm.calls] == [[1], [4]]  # b0 had the slot; priority is never held
    stats = loop.stats()
    assert (stats.waiting_requests, stats.flex_requests, stats.bulk_requests, stats.priority_requests) == (2, 1, 2, 1)

    llm.calls[0].allow()  # b0 ends, but with a person in the LLM there is no room
    final_only(b0)
    llm.settle()
    assert len(llm.calls) == 2

    llm.calls[1].allow()  # the person's reply ends: the slot goes to flex, then bulk
    final_only(person)
    llm.settle()
    assert [c.inputs for c in llm.calls[2:]] == [[3]]
    llm.calls[2].allow()
    final_only(f0)
    llm.settle()
    assert [c.inputs for c in llm.calls[2:]] == [[3], [2]]
    llm.calls[3].allow()
    final_only(b1)
    assert loop.stats().waiting_requests == 0


def test_a_cancelled_held_bulk_request_ends_cancelled_without_reaching_the_llm(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm, BATCH_OF_2)
    running = loop.submit(make_request("b0", (1,), max_tokens=1, request_class=BULK))
    held = loop.submit(make_request("b1", (2,), request_class=BULK))
    llm.settle()
    assert loop.stats().waiting_requests == 1
    loop.cancel("b1")
    assert final_only(held) == RequestOutput("b1", (), True, FinishReason.CANCELLED, 1, 0, 0)
    assert loop.stats().waiting_requests == 0
    llm.wait_for_calls(1)[0].allow()  # room appears; nothing is held any more
    final_only(running)
    llm.settle()
    assert [c.inputs for c in llm.calls] == [[1]]


# --- resume and stop sequences -----------------------------------------------------------------


def test_a_resumed_reply_continues_after_the_resumed_tokens(make_loop: Any) -> None:
    llm = FakeLLM()
    loop = make_loop(llm)
    outputs = read_to_end(loop.submit(make_request("r", (1, 2), max_tokens=6, resume=(3, 4))))
    assert reply(outputs) == [5, 6, 7, 8]
    assert outputs[-1] == RequestOutput("r", outputs[-1].new_token_ids, True, FinishReason.LENGTH, 2, 0, 4)
    (call,) = llm.calls
    assert call.inputs == [1, 2, 3, 4] and call.sampling["max_tokens"] == 4


def test_a_stop_sequence_may_span_resumed_and_new_tokens(make_loop: Any) -> None:
    llm = FakeLLM()
    loop = make_loop(llm)
    request = make_request("r", (1,), max_tokens=20, resume=(7, 8), stop_token_sequences=((8, 9), (40, 41)))
    assert final_only(loop.submit(request)) == RequestOutput("r", (9,), True, FinishReason.STOP, 1, 0, 1)
    assert llm.calls[0].aborted


def test_a_stop_sequence_truncates_the_reply_after_the_match_and_aborts_the_request(make_loop: Any) -> None:
    llm = FakeLLM(tokens_per_step=3)  # 11 12 13 | 14 15 16 | ...
    loop = make_loop(llm)
    stream = loop.submit(make_request("r", (10,), max_tokens=30, stop_token_sequences=((13, 14), (15, 16, 17))))
    outputs = read_to_end(stream)
    assert reply(outputs) == [11, 12, 13, 14]
    assert outputs[-1].finish_reason is FinishReason.STOP and outputs[-1].completion_tokens == 4
    (call,) = llm.calls
    assert call.aborted and call.outputs[0].token_ids == [11, 12, 13, 14, 15, 16]
    assert loop.stats().interactive_requests == 0


# --- invalid requests and failures -------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (make_request("r", ()), "prompt is empty"),
        (make_request("r", (1, 1000)), "token id 1000 is outside the vocabulary"),
        (make_request("r", tuple(range(64))), "no room in the model's context of 64"),
        (make_request("r", tuple(range(60)), max_tokens=9, resume=(1, 2, 3, 4)), "context of 64"),
    ],
)
def test_a_request_the_llm_cannot_serve_is_refused_on_submit(
    make_loop: Any, request_: EngineRequest, problem: str
) -> None:
    llm = FakeLLM()
    loop = make_loop(llm)
    with pytest.raises(ValueError, match=problem):
        loop.submit(request_)
    llm.settle()
    assert llm.calls == [] and loop.stats().interactive_requests == 0


def test_a_running_request_id_is_refused_again(make_loop: Any) -> None:
    loop = make_loop(FakeLLM(gated=True))
    loop.submit(make_request("r"))
    with pytest.raises(ValueError, match="already running"):
        loop.submit(make_request("r"))


def test_a_failing_generation_ends_aborted_once_and_frees_its_slot(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm, BATCH_OF_2)
    failing = loop.submit(make_request("b0", (1,), max_tokens=10, request_class=BULK))
    held = loop.submit(make_request("b1", (2,), max_tokens=1, request_class=BULK))
    (generation,) = llm.wait_for_calls(1)
    generation.allow()
    assert reply(read_tokens(failing, 1)) == [2]
    generation.fail(RuntimeError("executor died"))
    assert final_only(failing) == RequestOutput("b0", (), True, FinishReason.ABORTED, 1, 0, 1)
    llm.wait_for_calls(2)[1].allow()  # the held request got the slot
    assert final_only(held).finish_reason is FinishReason.LENGTH
    assert loop.stats().bulk_requests == 0


def test_a_failing_submit_ends_aborted(make_loop: Any) -> None:
    loop = make_loop(FakeLLM(submit_error=RuntimeError("queue full")))
    assert final_only(loop.submit(make_request("r"))) == RequestOutput("r", (), True, FinishReason.ABORTED, 3, 0, 0)
    assert loop.stats().interactive_requests == 0


def test_stop_aborts_everything_unfinished_with_one_final_output_each(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm, BATCH_OF_2)
    person = loop.submit(make_request("i", (1,), max_tokens=10))
    bulk = loop.submit(make_request("b", (2,), max_tokens=10, request_class=BULK))
    (generation,) = llm.wait_for_calls(1)
    generation.allow()
    read_tokens(person, 1)
    loop.stop(TIMEOUT_S)
    assert final_only(person) == RequestOutput("i", (), True, FinishReason.ABORTED, 1, 0, 1)
    assert final_only(bulk) == RequestOutput("b", (), True, FinishReason.ABORTED, 1, 0, 0)  # held
    assert generation.aborted and llm.shut_down
    assert [c.inputs for c in llm.calls] == [[1]]


# --- stats -------------------------------------------------------------------------------------


def test_stats_before_any_record_are_the_limits_figures(make_loop: Any) -> None:
    loop = make_loop(FakeLLM())
    assert loop.stats() == EngineStats(
        max_blocks=128,  # 4096 KV tokens / 32 per block
        free_blocks=128,
        used_blocks=0,
        tokens_per_block=32,
        reused_blocks=0,
        active_requests=0,
        max_requests=8,
        scheduled_requests=0,
        context_requests=0,
        waiting_requests=0,
    )


def stats_record(active: int, queued: int, used: int) -> dict[str, Any]:
    return {
        "numActiveRequests": active,
        "numQueuedRequests": queued,
        "maxNumActiveRequests": 64,
        "kvCacheStats": {
            "maxNumBlocks": 100,
            "freeNumBlocks": 100 - used,
            "usedNumBlocks": used,
            "tokensPerBlock": 16,
            "reusedBlocks": 3,
        },
        "inflightBatchingStats": {"numScheduledRequests": active, "numContextRequests": 1},
    }


def test_stats_follow_the_latest_record_bounded_by_what_the_loop_knows(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm)
    person = loop.submit(make_request("i", (1,), max_tokens=1))
    bulk = loop.submit(make_request("b", (2,), max_tokens=1, request_class=BULK))
    generations = llm.wait_for_calls(2)
    llm.add_stats(stats_record(active=2, queued=0, used=10))
    llm.wait_stats_consumed(1)
    assert loop.stats() == EngineStats(100, 90, 10, 16, 3, 2, 64, 2, 1, 0, interactive_requests=1, bulk_requests=1)

    # A record that claims more than the loop has in the LLM is capped at the loop's count.
    llm.add_stats(stats_record(active=5, queued=3, used=10))
    llm.wait_stats_consumed(2)
    assert loop.stats() == EngineStats(100, 90, 10, 16, 3, 2, 64, 2, 1, 0, interactive_requests=1, bulk_requests=1)

    # Idle: the engine runs no iteration, so its last record still shows the finished work.
    for generation in generations:
        generation.allow()
    final_only(person)
    final_only(bulk)
    assert loop.stats() == EngineStats(100, 100, 0, 16, 3, 0, 64, 0, 0, 0, interactive_requests=0, bulk_requests=0)


def test_a_json_record_with_missing_keys_keeps_the_limits_figures_for_them(make_loop: Any) -> None:
    llm = FakeLLM(gated=True)
    loop = make_loop(llm)
    loop.submit(make_request("i", (1,)))
    llm.wait_for_calls(1)
    llm.add_stats('{"numActiveRequests": 1, "kvCacheStats": {"usedNumBlocks": 4, "freeNumBlocks": 124}}')
    llm.wait_stats_consumed(1)
    assert loop.stats() == EngineStats(128, 124, 4, 32, 0, 1, 8, 0, 0, 0, interactive_requests=1)


# --- behind EngineHost: the cpu_engine tensor contract, end to end -----------------------------


class Sink:
    """A Triton response sender that records what it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[Outputs | None, bool, str | None]] = []
        self.cancelled = False
        self._cond = threading.Condition()

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        with self._cond:
            self.sent.append((outputs, final, error))
            self._cond.notify_all()

    def is_cancelled(self) -> bool:
        return self.cancelled

    def wait_for(self, condition: Callable[[], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(condition, TIMEOUT_S), f"sent so far: {self.sent}"

    def wait_final(self) -> Outputs | None:
        self.wait_for(lambda: any(final for _, final, _ in self.sent))
        assert [final for _, final, _ in self.sent].count(True) == 1
        outputs, final, error = self.sent[-1]
        assert final and error is None, self.sent[-1]
        return outputs

    def tokens(self) -> list[int]:
        return [int(t) for outputs, _, _ in self.sent if outputs is not None for t in outputs["output_token_ids"]]


class Publisher:
    def __init__(self) -> None:
        self.published: list[EngineStats] = []

    def publish(self, stats: EngineStats) -> None:
        self.published.append(stats)

    def heartbeat(self, unix_time: float) -> None:
        pass


@pytest.fixture
def make_host(make_loop: Any) -> Iterator[Callable[..., tuple[EngineHost, Publisher]]]:
    hosts: list[EngineHost] = []

    def build(llm: Any) -> tuple[EngineHost, Publisher]:
        publisher = Publisher()
        host = EngineHost(make_loop(llm, start=False), publisher, cancel_poll_s=0.01)
        hosts.append(host)
        host.start()
        return host, publisher

    yield build
    for host in hosts:
        host.stop(TIMEOUT_S)


def tensors(request: EngineRequest) -> DictTensorSource:
    return DictTensorSource(engine_request_tensors(request))


def test_host_streams_the_reply_as_cpu_engine_responses(make_host: Any) -> None:
    llm = FakeLLM(cached_tokens=1)
    host, _ = make_host(llm)
    sink = Sink()
    request = make_request("x", (1, 2, 3), max_tokens=5, resume=(4,), namespace="t", stop_token_ids=(9,))
    host.handle("r1", tensors(request), sink)
    last = sink.wait_final()
    assert sink.tokens() == [5, 6, 7, 8]
    assert last is not None and last["finish_reason"][0] == b"length"
    counts = [int(last[name][0]) for name in ("prompt_tokens", "cached_tokens", "completion_tokens")]
    assert counts == [3, 1, 4]
    (call,) = llm.calls
    assert call.inputs == [1, 2, 3, 4] and call.extra == {"cache_salt": "t"}
    assert call.sampling == {**GREEDY, "stop_token_ids": [9]}


def test_host_forwards_control_and_client_cancels_to_the_llm(make_host: Any) -> None:
    llm = FakeLLM(gated=True)
    host, publisher = make_host(llm)
    controlled, hung_up = Sink(), Sink()
    host.handle("r1", tensors(make_request("x", (1,), max_tokens=50)), controlled)
    host.handle("r2", tensors(make_request("x", (5,), max_tokens=50)), hung_up)
    first, second = llm.wait_for_calls(2)
    first.allow()
    controlled.wait_for(lambda: controlled.tokens() == [2])
    # The pass that sent that token published the loop's stats first: both replies running.
    assert any(stats.interactive_requests == 2 for stats in publisher.published)
    host.handle("c1", DictTensorSource(cancel_request_tensors("r1")), Sink())
    last = controlled.wait_final()
    assert last is not None and last["finish_reason"][0] == b"cancelled" and int(last["completion_tokens"][0]) == 1
    hung_up.cancelled = True
    last = hung_up.wait_final()
    assert last is not None and last["finish_reason"][0] == b"cancelled"
    assert first.aborted and second.aborted
    assert host.active_request_ids == []


def test_host_answers_a_request_the_llm_cannot_serve_with_an_error(make_host: Any) -> None:
    llm = FakeLLM()
    host, _ = make_host(llm)
    sink = Sink()
    host.handle("r1", tensors(make_request("x", tuple(range(64)))), sink)
    ((outputs, final, error),) = sink.sent
    assert outputs is None and final and error is not None and "context of 64" in error
    assert llm.calls == []


def test_host_stop_ends_a_running_reply_aborted_once(make_host: Any) -> None:
    llm = FakeLLM(gated=True)
    host, _ = make_host(llm)
    sink = Sink()
    host.handle("r1", tensors(make_request("x", (1,), max_tokens=50)), sink)
    (generation,) = llm.wait_for_calls(1)
    generation.allow(2)
    sink.wait_for(lambda: sink.tokens() == [2, 3])
    host.stop(TIMEOUT_S)
    last = sink.wait_final()
    assert last is not None and last["finish_reason"][0] == b"aborted" and int(last["completion_tokens"][0]) == 2
    assert generation.aborted and llm.shut_down


def test_a_grammar_goes_to_tensorrt_llms_guided_decoding_and_bad_ones_are_refused() -> None:
    """The request's Lark grammar becomes `guided_decoding=GuidedDecodingParams(grammar=...)`;
    a grammar llguidance refuses, log-probabilities and a constrained resume are the caller's
    errors here, before the LLM sees anything."""
    llm = FakeLLM()
    loop = LlmApiEngineLoop(llm, dict, LIMITS, stats_interval_s=0.01, guided_decoding_params=dict)
    loop.start()
    try:
        grammar = 'start: %json {"type":"object"}'
        constrained = make_request("g", (1, 2), max_tokens=3)
        constrained = replace(constrained, sampling=replace(constrained.sampling, grammar=grammar))
        read_to_end(loop.submit(constrained))
        (call,) = llm.calls
        assert call.sampling["guided_decoding"] == {"grammar": grammar}
        refused = {
            "the grammar does not compile": replace(constrained.sampling, grammar="start: nope"),
            "log-probabilities are not served": replace(constrained.sampling, grammar=None, logprobs=2),
        }
        for message, sampling in refused.items():
            with pytest.raises(ValueError, match=message):
                loop.submit(replace(constrained, request_id="x", sampling=sampling))
        with pytest.raises(ValueError, match="cannot be resumed"):
            loop.submit(replace(constrained, request_id="y", resume_token_ids=(3,)))
        assert len(llm.calls) == 1
    finally:
        loop.stop(TIMEOUT_S)
