"""TritonStages over a fake `pb_utils`: what it sends each dialect's engine, and what it yields."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

from bls.cpp_backend_tensors import CppBackendDialect
from bls.engine_tensors import engine_output_tensors, parse_engine_request
from bls.llm_pipeline import StageError
from bls.preprocessing import Preprocessor
from bls.tensors import Array, DictTensorSource, InputError, Outputs
from bls.tokenizer import PromptTokenizer
from bls.triton_stages import TritonStages
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams


class FakeTensor:
    def __init__(self, name: str, array: Array) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Array:
        return self._array


class FakeError:
    def __init__(self, message: str) -> None:
        self._message = message

    def message(self) -> str:
        return self._message


class FakeResponse:
    def __init__(self, outputs: Outputs | None = None, error: str | None = None) -> None:
        self.outputs = outputs or {}
        self._error = error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> FakeError:
        assert self._error is not None
        return FakeError(self._error)

    def output_tensors(self) -> list[FakeTensor]:
        return [FakeTensor(n, a) for n, a in self.outputs.items()]


@dataclass
class Sent:
    model_name: str
    inputs: Outputs
    requested_output_names: list[str]
    request_id: str


class FakePbUtils:
    """Records every BLS request; `engine(sent)` scripts the responses each one gets."""

    Tensor = FakeTensor

    def __init__(self, engine: Callable[[Sent], list[FakeResponse]]) -> None:
        self.engine = engine
        self.sent: list[Sent] = []
        self.drained: list[str] = []

    def InferenceRequest(
        self, model_name: str, inputs: list[FakeTensor], requested_output_names: list[str], request_id: str
    ) -> FakeInference:
        sent = Sent(model_name, {t.name(): t.as_numpy() for t in inputs}, requested_output_names, request_id)
        self.sent.append(sent)
        return FakeInference(self, sent)

    @staticmethod
    def get_output_tensor_by_name(response: FakeResponse, name: str) -> FakeTensor | None:
        array = response.outputs.get(name)
        return None if array is None else FakeTensor(name, array)


class FakeInference:
    def __init__(self, pb: FakePbUtils, sent: Sent) -> None:
        self._pb, self._sent = pb, sent

    def exec(self, decoupled: bool) -> Iterator[FakeResponse]:
        assert decoupled
        return self._responses()

    def _responses(self) -> Iterator[FakeResponse]:
        yield from self._pb.engine(self._sent)
        self._pb.drained.append(self._sent.request_id)


class Observer:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def started(self, request: EngineRequest) -> None:
        self.events.append(("started", request.request_id))

    def finished(self, request: EngineRequest) -> None:
        self.events.append(("finished", request.request_id))


def cpp_response(ids: list[int]) -> FakeResponse:
    return FakeResponse(
        {
            "output_ids": np.asarray([[ids]], dtype=np.int32),
            "sequence_length": np.asarray([[len(ids)]], dtype=np.int32),
        }
    )


REQUEST = EngineRequest("r1", (1, 5, 6), SamplingParams(max_tokens=3), request_class=RequestClass.BULK)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


async def test_cpp_dialect_stream_ends_with_the_inferred_finish(executor: ThreadPoolExecutor) -> None:
    pb = FakePbUtils(lambda sent: [cpp_response([11, 12]), cpp_response([13])])
    observer = Observer()
    stages = TritonStages(pb, "tensorrt_llm", executor, dialect=CppBackendDialect([2]), observer=observer)
    outputs = [o async for o in stages.generate(REQUEST)]
    assert outputs == [
        RequestOutput("r1", (11, 12), False, None, 3, 0, 2),
        RequestOutput("r1", (13,), False, None, 3, 0, 3),
        RequestOutput("r1", (), True, FinishReason.LENGTH, 3, 0, 3),
    ]
    (sent,) = pb.sent
    assert (sent.model_name, sent.request_id, sent.requested_output_names) == (
        "tensorrt_llm",
        "r1",
        ["output_ids", "sequence_length"],
    )
    assert sent.inputs["input_ids"].tolist() == [[1, 5, 6]]
    assert observer.events == [("started", "r1"), ("finished", "r1")]


async def test_cpp_cancel_is_sent_under_the_request_id_and_reads_as_cancelled(executor: ThreadPoolExecutor) -> None:
    def engine(sent: Sent) -> list[FakeResponse]:
        if "stop" in sent.inputs:
            return [FakeResponse()]  # the backend's empty FINAL for a stop request
        return [cpp_response([11]), cpp_response([12])]

    pb = FakePbUtils(engine)
    stages = TritonStages(pb, "tensorrt_llm", executor, dialect=CppBackendDialect([2]))
    outputs = []
    async with contextlib.aclosing(stages.generate(REQUEST)) as stream:
        async for output in stream:
            outputs.append(output)
            if len(outputs) == 1:
                await stages.cancel("r1")
    assert outputs[-1] == RequestOutput("r1", (), True, FinishReason.CANCELLED, 3, 0, 2)
    cancel = pb.sent[1]
    assert (cancel.request_id, cancel.requested_output_names) == ("r1", [])
    assert cancel.inputs["stop"].tolist() == [[True]]


async def test_closing_early_drains_the_engine_before_counting_the_request_finished(
    executor: ThreadPoolExecutor,
) -> None:
    pb = FakePbUtils(lambda sent: [cpp_response([11]), cpp_response([12]), cpp_response([13])])
    observer = Observer()
    stages = TritonStages(pb, "tensorrt_llm", executor, dialect=CppBackendDialect([2]), observer=observer)
    async with contextlib.aclosing(stages.generate(REQUEST)) as stream:
        async for _ in stream:
            break
    assert pb.drained == ["r1"]
    assert observer.events == [("started", "r1"), ("finished", "r1")]


async def test_engine_errors_and_bad_tensors_are_stage_errors(executor: ThreadPoolExecutor) -> None:
    observer = Observer()
    failing = TritonStages(
        FakePbUtils(lambda sent: [FakeResponse(error="out of KV")]),
        "tensorrt_llm",
        executor,
        dialect=CppBackendDialect([2]),
        observer=observer,
    )
    with pytest.raises(StageError, match="tensorrt_llm: out of KV"):
        _ = [o async for o in failing.generate(REQUEST)]
    bad = FakeResponse({"output_ids": np.zeros((1, 2, 1), np.int32), "sequence_length": np.ones((1, 2), np.int32)})
    garbled = TritonStages(FakePbUtils(lambda sent: [bad]), "tensorrt_llm", executor, dialect=CppBackendDialect([2]))
    with pytest.raises(StageError, match=r"answered with bad tensors: .*one beam"):
        _ = [o async for o in garbled.generate(REQUEST)]
    assert observer.events == [("started", "r1"), ("finished", "r1")]


async def test_switchyard_is_the_default_dialect(executor: ThreadPoolExecutor) -> None:
    final = RequestOutput("r1", (11,), True, FinishReason.STOP, 3, 1, 1)

    def engine(sent: Sent) -> list[FakeResponse]:
        if "cancel_request_id" in sent.inputs:
            return [FakeResponse()]
        return [FakeResponse(engine_output_tensors(final)), FakeResponse()]  # then a bare FINAL

    pb = FakePbUtils(engine)
    stages = TritonStages(pb, "cpu_engine", executor)
    assert [o async for o in stages.generate(REQUEST)] == [final]
    assert parse_engine_request("r1", DictTensorSource(pb.sent[0].inputs)) == REQUEST
    await stages.cancel("r1")
    assert (pb.sent[1].request_id, pb.sent[1].inputs["cancel_request_id"].tolist()) == ("", [b"r1"])


def test_a_prompt_of_ids_is_taken_in_process_and_refused_without_a_tokenizer(
    executor: ThreadPoolExecutor, tokenizer: PromptTokenizer
) -> None:
    pb = FakePbUtils(lambda sent: pytest.fail(f"no BLS call expected, got one to {sent.model_name}"))
    stages = TritonStages(pb, "cpu_engine", executor, preprocessor=Preprocessor(tokenizer))
    ids = tuple(tokenizer.encode_prompt("Hello world"))
    assert stages.preprocess_tokenized(ids, ["world"]) == Preprocessor(tokenizer).run("Hello world", ["world"])
    with pytest.raises(InputError, match="send the prompt as text_input"):
        TritonStages(pb, "cpu_engine", executor).preprocess_tokenized(ids, ())
    assert pb.sent == []
