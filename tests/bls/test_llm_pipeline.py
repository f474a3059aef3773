"""LlmPipeline with the real tokenizer and postprocessor in-process and a scripted engine."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Sequence

import numpy as np
import pytest

from bls.llm_pipeline import LlmPipeline, StageError
from bls.llm_request import LlmRequest, llm_request_tensors
from bls.postprocessing import Postprocessor, PostprocessResult, PostprocessState
from bls.preprocessing import Preprocessed, Preprocessor
from bls.tensors import DictTensorSource, Outputs
from bls.tokenizer import PromptTokenizer
from engine.request import EngineRequest, FinishReason, RequestOutput, SamplingParams, TokenLogprobs


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[Outputs | None, bool, str | None]] = []
        self.cancelled = False

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        assert not any(f for _, f, _ in self.sent), "nothing may follow FINAL"
        self.sent.append((outputs, final, error))

    def is_cancelled(self) -> bool:
        return self.cancelled

    def texts(self) -> list[str]:
        return [o["text_output"][0].decode() for o, _, _ in self.sent if o is not None]

    def final(self) -> tuple[Outputs | None, str | None]:
        finals = [(o, e) for o, f, e in self.sent if f]
        assert len(finals) == 1 and self.sent[-1][1]
        return finals[0]


class FakeStages:
    """Scripted engine: yields `chunks` of token ids, one output each; honours cancel."""

    def __init__(self, tokenizer: PromptTokenizer, chunks: Sequence[Sequence[int]], *, hang: bool = False) -> None:
        self.pre, self.post = Preprocessor(tokenizer), Postprocessor(tokenizer)
        self.chunks = [tuple(c) for c in chunks]
        self.hang = hang  # after the chunks, wait for a cancel instead of finishing
        self.cancels: list[str] = []
        self.requests: list[EngineRequest] = []
        self.closed = False
        self._cancelled = asyncio.Event()
        self.fail_postprocess = False
        self.preprocessed: list[str] = []  # prompts sent to `preprocessing` (as text)

    async def preprocess(self, prompt: str, stops: Sequence[str]) -> Preprocessed:
        self.preprocessed.append(prompt)
        return self.pre.run(prompt, stops)

    def preprocess_tokenized(self, input_ids: tuple[int, ...], stops: Sequence[str]) -> Preprocessed:
        return self.pre.run_tokenized(input_ids, stops)

    async def postprocess(
        self, token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
    ) -> PostprocessResult:
        if self.fail_postprocess:
            raise RuntimeError("postprocessing exploded")
        return self.post.step(token_ids, state, stops, is_final=is_final)

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        self.requests.append(request)
        done, prompt = 0, len(request.prompt_token_ids)
        try:
            for i, chunk in enumerate(self.chunks):
                if self._cancelled.is_set():
                    break
                done += len(chunk)
                last = i == len(self.chunks) - 1 and not self.hang
                reason = FinishReason.LENGTH if last else None
                yield RequestOutput(request.request_id, chunk, last, reason, prompt, 0, done)
                await asyncio.sleep(0)
            if self.hang or self._cancelled.is_set():
                await self._cancelled.wait()
                yield RequestOutput(request.request_id, (), True, FinishReason.CANCELLED, prompt, 0, done)
        finally:
            self.closed = True

    async def cancel(self, request_id: str) -> None:
        self.cancels.append(request_id)
        self._cancelled.set()


def inputs(prompt: str = "Hello", **kwargs: object) -> DictTensorSource:
    sampling = SamplingParams(max_tokens=int(kwargs.pop("max_tokens", 50)))  # type: ignore[call-overload]
    return DictTensorSource(llm_request_tensors(LlmRequest(prompt=prompt, sampling=sampling, **kwargs)))  # type: ignore[arg-type]


def chunks_of(tokenizer: PromptTokenizer, text: str, size: int) -> list[list[int]]:
    ids = tokenizer.encode_stop(text)
    return [ids[i : i + size] for i in range(0, len(ids), size)]


REPLY = "Hello 🚀 world. Observation: done"


async def test_streamed_deltas_concatenate_to_the_reply(tokenizer: PromptTokenizer) -> None:
    stages = FakeStages(tokenizer, chunks_of(tokenizer, REPLY, 1))
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(), sink)
    outputs, error = sink.final()
    assert error is None and outputs is not None
    assert "".join(sink.texts()) == REPLY
    assert outputs["finish_reason"][0] == b"length"
    all_ids = [i for o, _, _ in sink.sent if o is not None for i in o["output_token_ids"]]
    assert all_ids == tokenizer.encode_stop(REPLY)
    assert int(outputs["completion_tokens"][0]) == len(all_ids)
    assert int(outputs["prompt_tokens"][0]) == len(tokenizer.encode_prompt("Hello"))
    assert len(sink.sent) == len(stages.chunks)  # one response per engine output
    assert stages.requests[0].request_id == "r1"


async def test_stream_false_sends_one_response(tokenizer: PromptTokenizer) -> None:
    stages = FakeStages(tokenizer, chunks_of(tokenizer, REPLY, 2))
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(stream=False), sink)
    assert len(sink.sent) == 1
    outputs, _ = sink.final()
    assert outputs is not None and outputs["text_output"][0].decode() == REPLY
    assert list(outputs["output_token_ids"]) == tokenizer.encode_stop(REPLY)


async def test_stop_string_ends_the_reply_and_cancels_the_engine(tokenizer: PromptTokenizer) -> None:
    stages = FakeStages(tokenizer, chunks_of(tokenizer, REPLY + " and more text after it", 1))
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(stops=("Observation:",)), sink)
    outputs, _ = sink.final()
    assert outputs is not None and outputs["finish_reason"][0] == b"stop"
    assert "".join(sink.texts()) == "Hello 🚀 world. "
    assert stages.cancels == ["r1"]
    assert stages.closed
    assert stages.requests[0].sampling.stop_token_sequences == (tuple(tokenizer.encode_stop("Observation:")),)


async def test_client_cancel_reaches_the_engine(tokenizer: PromptTokenizer) -> None:
    stages = FakeStages(tokenizer, chunks_of(tokenizer, "Hello", 1), hang=True)
    sink = Sink()
    task = asyncio.create_task(LlmPipeline(stages, cancel_poll_s=0.01).run("r1", inputs(), sink))
    await asyncio.sleep(0.05)
    assert not task.done()
    sink.cancelled = True
    await asyncio.wait_for(task, 2.0)
    outputs, error = sink.final()
    assert error is None and outputs is not None and outputs["finish_reason"][0] == b"cancelled"
    assert stages.cancels == ["r1"]


async def test_resumed_reply_continues_without_repeating_text(tokenizer: PromptTokenizer) -> None:
    ids = tokenizer.encode_stop(REPLY)
    cut = 5
    stages = FakeStages(tokenizer, [ids[cut:]])
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(resume_token_ids=tuple(ids[:cut])), sink)
    sent_before = tokenizer.decode(ids[:cut]).rstrip("\ufffd")
    assert sent_before + "".join(sink.texts()) == REPLY
    assert stages.requests[0].resume_token_ids == tuple(ids[:cut])


def as_lists(sink: Sink) -> list[tuple[dict[str, list[object]] | None, bool, str | None]]:
    return [(None if o is None else {k: a.tolist() for k, a in o.items()}, f, e) for o, f, e in sink.sent]


async def test_a_prompt_sent_as_its_ids_skips_preprocessing_and_replies_the_same(tokenizer: PromptTokenizer) -> None:
    """The gateway's path: the same engine request (prompt ids, stop sequences, namespace,
    resumed tokens) and the same responses (text, ids, usage) as from the text."""
    ids = tokenizer.encode_stop(REPLY + " and more text after it")
    options = {"stops": ("Observation:",), "resume_token_ids": tuple(ids[:2]), "cache_namespace": "team-a"}
    runs = []
    for prompt in (
        {"prompt": "Hello 🚀"},
        {"prompt": "", "prompt_token_ids": tuple(tokenizer.encode_prompt("Hello 🚀"))},
    ):
        stages, sink = FakeStages(tokenizer, [[i] for i in ids[2:]]), Sink()
        await LlmPipeline(stages).run("r1", inputs(**prompt, **options), sink)  # type: ignore[arg-type]
        runs.append((stages, sink))
    (by_text, text_sink), (by_ids, ids_sink) = runs
    assert by_text.preprocessed == ["Hello 🚀"] and by_ids.preprocessed == []
    assert by_ids.requests == by_text.requests
    assert by_ids.requests[0].sampling.stop_token_sequences == (tuple(tokenizer.encode_stop("Observation:")),)
    assert as_lists(ids_sink) == as_lists(text_sink)
    outputs, error = ids_sink.final()
    assert error is None and outputs is not None and outputs["finish_reason"][0] == b"stop"
    assert int(outputs["prompt_tokens"][0]) == len(tokenizer.encode_prompt("Hello 🚀"))


async def test_ids_outside_the_vocabulary_are_the_callers_invalid_input(tokenizer: PromptTokenizer) -> None:
    vocab = tokenizer.vocab_size
    for ids, bad in (((1, -1, 5), [-1]), ((1, vocab, 7, vocab + 1), [vocab, vocab + 1])):
        stages, sink = FakeStages(tokenizer, [[5]]), Sink()
        await LlmPipeline(stages).run("r1", inputs(prompt="", prompt_token_ids=ids), sink)
        assert sink.sent == [
            (None, True, f"invalid input: input_ids holds ids outside the vocabulary [0, {vocab}): {bad}")
        ]
        assert stages.requests == [] and stages.preprocessed == []
    # The vocabulary's last id is in it.
    stages, sink = FakeStages(tokenizer, [[5]]), Sink()
    await LlmPipeline(stages).run("r1", inputs(prompt="", prompt_token_ids=(0, vocab - 1)), sink)
    assert sink.final()[1] is None and stages.requests[0].prompt_token_ids == (0, vocab - 1)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"text_input": np.array([b"hi"], dtype=np.object_), "input_ids": np.array([1, 5], dtype=np.int32)}, "both"),
        ({}, "neither"),
        ({"input_ids": np.array([], dtype=np.int32)}, "input_ids must not be empty"),
        ({"input_ids": np.array([1.0, 5.0], dtype=np.float32)}, "input 'input_ids' must be integers"),
    ],
)
async def test_the_prompt_is_text_or_ids_exactly_once(
    tokenizer: PromptTokenizer, tensors: dict[str, np.ndarray], message: str
) -> None:
    sink = Sink()
    src = DictTensorSource({**tensors, "max_tokens": np.array([3], dtype=np.int32)})
    await LlmPipeline(FakeStages(tokenizer, [])).run("r1", src, sink)
    [(outputs, final, error)] = sink.sent
    assert outputs is None and final and error is not None
    assert error.startswith("invalid input: ") and message in error


async def test_bad_input_is_an_error_with_final(tokenizer: PromptTokenizer) -> None:
    sink = Sink()
    src = DictTensorSource({"text_input": np.array([b"hi"], dtype=np.object_)})
    await LlmPipeline(FakeStages(tokenizer, [])).run("r1", src, sink)
    assert sink.sent == [(None, True, "invalid input: input 'max_tokens' is required")]


async def test_stage_error_is_passed_on(tokenizer: PromptTokenizer) -> None:
    stages = FakeStages(tokenizer, [])

    async def broken(prompt: str, stops: Sequence[str]) -> Preprocessed:
        raise StageError("preprocessing: text_input encodes to no tokens")

    stages.preprocess = broken  # type: ignore[method-assign]
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(), sink)
    assert sink.sent == [(None, True, "preprocessing: text_input encodes to no tokens")]


async def test_failure_mid_stream_cancels_the_engine_and_sends_error_final(
    tokenizer: PromptTokenizer,
) -> None:
    stages = FakeStages(tokenizer, chunks_of(tokenizer, REPLY, 1))
    stages.fail_postprocess = True
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(), sink)
    _, error = sink.final()
    assert error is not None and "postprocessing exploded" in error
    assert stages.cancels == ["r1"]
    assert stages.closed


@pytest.mark.parametrize("stream", [True, False])
async def test_task_cancellation_still_sends_final(tokenizer: PromptTokenizer, stream: bool) -> None:
    stages = FakeStages(tokenizer, [], hang=True)
    sink = Sink()
    task = asyncio.create_task(LlmPipeline(stages).run("r1", inputs(stream=stream), sink))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _, error = sink.final()
    assert error is not None


def sent_ids(sink: Sink) -> list[int]:
    return [i for o, _, _ in sink.sent if o is not None for i in o["output_token_ids"]]


def usage(sink: Sink) -> tuple[int, int]:
    outputs, _ = sink.final()
    assert outputs is not None
    return int(outputs["completion_tokens"][0]), int(outputs["discarded_tokens"][0])


class LateCancelStages(FakeStages):
    """An engine whose cancel lands `late` outputs after it was asked for (it had steps queued)."""

    def __init__(self, tokenizer: PromptTokenizer, chunks: Sequence[Sequence[int]], late: int) -> None:
        super().__init__(tokenizer, chunks)
        self.late = late

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        done, prompt, after_cancel = 0, len(request.prompt_token_ids), 0
        for chunk in self.chunks:
            if self._cancelled.is_set():
                if after_cancel == self.late:
                    break
                after_cancel += 1
            done += len(chunk)
            yield RequestOutput(request.request_id, chunk, False, None, prompt, 0, done)
            await asyncio.sleep(0)
        yield RequestOutput(request.request_id, (), True, FinishReason.CANCELLED, prompt, 0, done)


STOPPED = REPLY + " and more text after it, much more"


def tokens_through_stop(tokenizer: PromptTokenizer, text: str, stop: str) -> int:
    """The rule, spelled out: the reply's tokens up to and including the one the stop ends in."""
    ids = tokenizer.encode_stop(text)
    return next(k for k in range(len(ids) + 1) if stop in tokenizer.decode(ids[:k]))


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 40])
async def test_usage_past_a_stop_is_the_same_however_the_engine_batched(
    tokenizer: PromptTokenizer, chunk_size: int
) -> None:
    # The engine merges steps while `llm` reads: the output that holds the stop string may
    # hold 1 or 40 tokens. The client gets, and is billed, the same tokens either way.
    stages = FakeStages(tokenizer, chunks_of(tokenizer, STOPPED, chunk_size), hang=True)
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(stops=("Observation:",)), sink)
    expected = tokens_through_stop(tokenizer, STOPPED, "Observation:")
    completion, discarded = usage(sink)
    assert "".join(sink.texts()) == "Hello 🚀 world. "
    assert sent_ids(sink) == tokenizer.encode_stop(STOPPED)[:expected]
    assert completion == expected
    written = min(len(tokenizer.encode_stop(STOPPED)), -(-expected // chunk_size) * chunk_size)
    assert discarded == written - expected


async def test_engine_work_after_the_cancel_is_discarded_not_billed(tokenizer: PromptTokenizer) -> None:
    stages = LateCancelStages(tokenizer, chunks_of(tokenizer, STOPPED, 1), late=3)
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(stops=("Observation:",)), sink)
    expected = tokens_through_stop(tokenizer, STOPPED, "Observation:")
    assert usage(sink) == (expected, 3)  # the 3 tokens the engine wrote before the cancel landed
    assert sent_ids(sink) == tokenizer.encode_stop(STOPPED)[:expected]
    assert stages.cancels == ["r1"]


async def test_resumed_reply_counts_only_the_tokens_it_sent(tokenizer: PromptTokenizer) -> None:
    ids = tokenizer.encode_stop(REPLY)
    cut = 5
    stages = FakeStages(tokenizer, [ids[cut:]])
    sink = Sink()
    await LlmPipeline(stages).run("r1", inputs(resume_token_ids=tuple(ids[:cut])), sink)
    assert usage(sink) == (len(ids) - cut, 0)  # the server before billed the first `cut`


class LogprobStages(FakeStages):
    """The scripted engine, reporting log-probability -(token id) for each token, 2 alternatives."""

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        async for output in super().generate(request):
            ids = output.new_token_ids
            run = TokenLogprobs(
                tuple(-float(t) for t in ids), tuple(t for t in ids for _ in (0, 1)), (-1.0,) * (2 * len(ids)), 2
            )
            yield dataclasses.replace(output, logprobs=run)


async def test_logprobs_go_with_their_tokens_and_are_cut_with_them_at_a_stop(tokenizer: PromptTokenizer) -> None:
    stages = LogprobStages(tokenizer, chunks_of(tokenizer, REPLY + " and more text after it", 3))
    sink = Sink()
    source = inputs(stops=("Observation:",))
    await LlmPipeline(stages).run(
        "r1", DictTensorSource({**source._tensors, "logprobs": np.array([2], np.int32)}), sink
    )
    assert stages.requests[0].sampling.logprobs == 2
    sent = [(o["output_token_ids"].tolist(), o["output_token_logprobs"].tolist(), o["output_top_logprob_ids"].tolist())
            for o, _, _ in sink.sent if o is not None]  # fmt: skip
    for ids, values, top in sent:  # aligned in every response, the last one cut at the stop
        assert values == [-float(t) for t in ids] and top == [t for t in ids for _ in (0, 1)]
    assert sum(len(ids) for ids, _, _ in sent) == sink.final()[0]["completion_tokens"][0]  # type: ignore[index]


async def test_no_logprob_tensors_unless_asked(tokenizer: PromptTokenizer) -> None:
    sink = Sink()
    await LlmPipeline(LogprobStages(tokenizer, chunks_of(tokenizer, REPLY, 4))).run("r1", inputs(), sink)
    assert all(not any("logprob" in name for name in o) for o, _, _ in sink.sent if o is not None)
