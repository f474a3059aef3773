"""LlmModel, `llm`'s shell logic, built from config.pbtxt parameters over a fake `pb_utils`:
which models a request reaches, the gauges it publishes for a C++ engine, and load errors.
(The real stub: tests/integration/test_triton_llm.py.)"""

from __future__ import annotations

import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bls.engine_tensors import engine_output_tensors, parse_engine_request
from bls.llm_model import LlmModel
from bls.llm_request import LlmRequest, llm_request_tensors
from bls.model_config import ModelConfigError
from bls.preprocessing import Preprocessor
from bls.tensors import Array, DictTensorSource, Outputs
from bls.tokenizer import PromptTokenizer
from engine.request import FinishReason, RequestOutput, SamplingParams


class FakeTensor:
    def __init__(self, name: str, array: Array) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Array:
        return self._array


@dataclass
class FakeResponse:
    outputs: Outputs
    error: str | None = None

    def has_error(self) -> bool:
        return self.error is not None

    def output_tensors(self) -> list[FakeTensor]:
        return [FakeTensor(n, a) for n, a in self.outputs.items()]


@dataclass
class Sender:
    """A decoupled request's response sender: records (outputs, flags) of every send."""

    sent: list[tuple[Outputs | None, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def send(self, response: FakeResponse | None = None, flags: int = 0) -> None:
        self.sent.append((None if response is None else response.outputs, flags))
        if response is not None and response.error is not None:
            self.errors.append(response.error)

    def is_cancelled(self) -> bool:
        return False


@dataclass
class FakeRequest:
    """A Triton request to `llm`."""

    inputs: Outputs
    sender: Sender = field(default_factory=Sender)

    def request_id(self) -> str:
        return ""  # the caller gave none: llm makes one

    def get_response_sender(self) -> Sender:
        return self.sender


@dataclass
class Call:
    model_name: str
    inputs: Outputs
    request_id: str


class FakeMetric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.values: list[float] = []

    def set(self, value: float) -> None:
        self.values.append(value)


class FakeMetricFamily:
    def __init__(self, name: str) -> None:
        self.name = name
        self.metrics: list[FakeMetric] = []

    def Metric(self, labels: dict[str, str]) -> FakeMetric:
        self.metrics.append(FakeMetric(labels))
        return self.metrics[-1]


class MetricFamilies:
    """`pb_utils.MetricFamily`, keeping every family made."""

    GAUGE = "gauge"

    def __init__(self) -> None:
        self.made: list[FakeMetricFamily] = []

    def __call__(self, name: str, description: str, kind: str) -> FakeMetricFamily:
        assert kind == self.GAUGE
        self.made.append(FakeMetricFamily(name))
        return self.made[-1]


class FakePbUtils:
    """The parts of `triton_python_backend_utils` `llm` uses; `answer(call)` scripts each BLS
    call's responses (one for a plain call, a list for a decoupled one)."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    Tensor = FakeTensor

    def __init__(self, answer: Callable[[Call], list[FakeResponse]] | None = None) -> None:
        self.answer = answer
        self.calls: list[Call] = []
        self.MetricFamily = MetricFamilies()

    def InferenceRequest(
        self, model_name: str, inputs: list[FakeTensor], requested_output_names: list[str], request_id: str
    ) -> FakeInference:
        call = Call(model_name, {t.name(): t.as_numpy() for t in inputs}, request_id)
        self.calls.append(call)
        assert self.answer is not None, f"unexpected BLS call to {model_name}"
        return FakeInference(self.answer(call))

    def InferenceResponse(self, output_tensors: list[FakeTensor], error: str | None = None) -> FakeResponse:
        return FakeResponse({t.name(): t.as_numpy() for t in output_tensors}, error)

    class TritonError(str):
        """An error as its code and message, e.g. 'INVALID_ARG: invalid input: ...'."""

        INVALID_ARG, INTERNAL = "INVALID_ARG", "INTERNAL"

        def __new__(cls, message: str, code: str = "INTERNAL") -> FakePbUtils.TritonError:
            return super().__new__(cls, f"{code}: {message}")

    @staticmethod
    def get_input_tensor_by_name(request: FakeRequest, name: str) -> FakeTensor | None:
        array = request.inputs.get(name)
        return None if array is None else FakeTensor(name, array)

    @staticmethod
    def get_output_tensor_by_name(response: FakeResponse, name: str) -> FakeTensor | None:
        array = response.outputs.get(name)
        return None if array is None else FakeTensor(name, array)


class FakeInference:
    def __init__(self, responses: list[FakeResponse]) -> None:
        self._responses = responses

    def exec(self, decoupled: bool) -> FakeResponse | Iterator[FakeResponse]:
        if decoupled:
            return iter(self._responses)
        (response,) = self._responses
        return response


def model_config(model_dir: Path, **params: str) -> dict[str, Any]:
    """The JSON Triton hands `initialize`, as far as LlmModel reads it."""
    values = {
        "engine_model_name": "cpu_engine",
        "engine_dialect": "switchyard",
        "max_streams": "4",
        "postprocess_in_process": "true",
        "model_dir": str(model_dir),
        **params,
    }
    return {"name": "llm", "parameters": {k: {"string_value": v} for k, v in values.items()}}


def gauge_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "llm-engine-gauges"]


def stages_answer(tokenizer: PromptTokenizer, reply: list[int]) -> Callable[[Call], list[FakeResponse]]:
    """BLS answers: `preprocessing` as the real model; the engine writes `reply`, a token a response."""

    def answer(call: Call) -> list[FakeResponse]:
        if call.model_name == "preprocessing":
            return [FakeResponse(Preprocessor(tokenizer).execute(DictTensorSource(call.inputs)))]
        prompt = len(parse_engine_request(call.request_id, DictTensorSource(call.inputs)).prompt_token_ids)
        return [
            FakeResponse(engine_output_tensors(RequestOutput(call.request_id, (t,), False, None, prompt, 0, i + 1)))
            for i, t in enumerate(reply[:-1])
        ] + [
            FakeResponse(
                engine_output_tensors(
                    RequestOutput(call.request_id, (reply[-1],), True, FinishReason.LENGTH, prompt, 0, len(reply))
                )
            )
        ]

    return answer


async def test_a_request_runs_preprocessing_then_the_named_engine_and_detokenizes_in_process(
    tokenizer_dir: Path, tokenizer: PromptTokenizer
) -> None:
    reply = tokenizer.encode_stop("Hello world")
    pb = FakePbUtils(stages_answer(tokenizer, reply))
    model = LlmModel.on_triton(pb, model_config(tokenizer_dir, engine_model_name="my_engine"), "llm", "1")
    try:
        request = FakeRequest(llm_request_tensors(LlmRequest("Hi", SamplingParams(max_tokens=len(reply)))))
        await model.execute([request])
    finally:
        model.close()

    # postprocess_in_process: no BLS call to `postprocessing`; the engine is the one named.
    assert [c.model_name for c in pb.calls] == ["preprocessing", "my_engine"]
    assert pb.calls[1].request_id.startswith("llm-")
    sent = request.sender.sent
    assert [flags for _, flags in sent] == [0] * (len(reply) - 1) + [1]
    assert "".join(o["text_output"][0].decode() for o, _ in sent if o is not None) == "Hello world"
    assert sent[-1][0] is not None and sent[-1][0]["finish_reason"][0] == b"length"
    assert pb.MetricFamily.made == []  # cpu_engine publishes its own gauges


async def test_a_prompt_sent_as_its_ids_calls_no_preprocessing_and_the_engine_gets_the_same(
    tokenizer_dir: Path, tokenizer: PromptTokenizer
) -> None:
    """The gateway's path: no BLS call to `preprocessing`; the engine gets the very tensors the
    text's path sends it (prompt ids, stop sequences encoded in process) and the reply is the same."""
    reply = tokenizer.encode_stop("Hello world")
    pb = FakePbUtils(stages_answer(tokenizer, reply))
    model = LlmModel.on_triton(pb, model_config(tokenizer_dir), "llm", "1")
    prompt, sampling, stops = "Hi there 🚀", SamplingParams(max_tokens=len(reply)), ("never said", "\n")
    by_text = FakeRequest(llm_request_tensors(LlmRequest(prompt, sampling, stops, cache_namespace="team-a")))
    ids = tuple(tokenizer.encode_prompt(prompt))
    by_ids = FakeRequest(
        llm_request_tensors(LlmRequest("", sampling, stops, cache_namespace="team-a", prompt_token_ids=ids))
    )
    try:
        await model.execute([by_text])
        await model.execute([by_ids])
    finally:
        model.close()

    assert [c.model_name for c in pb.calls] == ["preprocessing", "cpu_engine", "cpu_engine"]
    text_engine, ids_engine = ({k: a.tolist() for k, a in c.inputs.items()} for c in pb.calls[1:])
    assert ids_engine == text_engine and ids_engine["input_ids"] == list(ids)
    assert ids_engine["stop_token_sequences"]  # the stop strings, encoded in `llm` itself
    assert by_ids.sender.errors == by_text.sender.errors == []
    replies = [[(o and {k: a.tolist() for k, a in o.items()}, f) for o, f in r.sender.sent] for r in (by_text, by_ids)]
    assert replies[1] == replies[0]


async def test_ids_outside_the_vocabulary_are_refused_before_any_bls_call(
    tokenizer_dir: Path, tokenizer: PromptTokenizer
) -> None:
    pb = FakePbUtils()  # any BLS call fails the test
    model = LlmModel.on_triton(pb, model_config(tokenizer_dir), "llm", "1")
    vocab = tokenizer.vocab_size
    request = FakeRequest(
        llm_request_tensors(LlmRequest("", SamplingParams(max_tokens=3), prompt_token_ids=(1, 5, vocab)))
    )
    try:
        await model.execute([request])
    finally:
        model.close()
    assert pb.calls == []
    # Triton's INVALID_ARG, with the prefix the gateway reads as the caller's 400.
    message = f"invalid input: input_ids holds ids outside the vocabulary [0, {vocab}): [{vocab}]"
    assert request.sender.errors == [f"INVALID_ARG: {message}"]
    assert [flags for _, flags in request.sender.sent] == [1]


@pytest.fixture
def cpp_model_dir(tokenizer_dir: Path, tmp_path: Path) -> Path:
    """A model folder the C++ backend's dialect accepts: it names the EOS id."""
    shutil.copy(tokenizer_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "config.json").write_text('{"eos_token_id": 2}')
    return tmp_path


def test_a_cpp_engine_gets_llms_gauges_labelled_with_the_model_until_close(cpp_model_dir: Path) -> None:
    pb = FakePbUtils()
    config = model_config(cpp_model_dir, engine_dialect="tensorrtllm_cpp", postprocess_in_process="false")
    model = LlmModel.on_triton(pb, config, "llm", "7")
    try:
        (heartbeat,) = [f for f in pb.MetricFamily.made if f.name == "switchyard_engine_heartbeat"]
        deadline = time.monotonic() + 5
        while not heartbeat.metrics[0].values and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heartbeat.metrics[0].values, "no heartbeat within 5 s"
        assert heartbeat.metrics[0].labels == {"model": "llm", "version": "7"}
        assert {f.name for f in pb.MetricFamily.made} == {"switchyard_engine_heartbeat", "switchyard_engine_requests"}
        assert len(gauge_threads()) == 1
    finally:
        model.close()
    assert gauge_threads() == []
    assert pb.calls == []


def test_close_frees_the_metric_families_while_the_stub_still_runs(cpp_model_dir: Path) -> None:
    """Families still alive at the stub's teardown crash it (see bls/engine_host.py's stop)."""
    pb = FakePbUtils()
    config = model_config(cpp_model_dir, engine_dialect="tensorrtllm_cpp", postprocess_in_process="false")
    model = LlmModel.on_triton(pb, config, "llm", "7")
    families = [weakref.ref(family) for family in pb.MetricFamily.made]
    pb.MetricFamily.made.clear()
    assert families and all(family() is not None for family in families)
    model.close()
    assert [family() for family in families] == [None] * len(families)


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("max_streams", "", "'max_streams' is missing"),
        ("engine_dialect", "grpc", "'engine_dialect' must be one of"),
        ("engine_model_name", "", "'engine_model_name' is missing"),
        ("postprocess_in_process", "maybe", "'postprocess_in_process' must be true or false"),
    ],
)
def test_a_bad_parameter_fails_the_load_and_starts_nothing(
    cpp_model_dir: Path, param: str, value: str, message: str
) -> None:
    config = model_config(cpp_model_dir, **{"engine_dialect": "tensorrtllm_cpp", param: value})
    with pytest.raises(ModelConfigError, match=message):
        LlmModel.on_triton(FakePbUtils(), config, "llm", "1")
    assert gauge_threads() == []
