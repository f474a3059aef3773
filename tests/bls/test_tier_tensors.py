"""The tiers at the servers' edge: `request_class` takes the four classes and `slo_ttft_ms` (the
caller's first-token target) is read, checked and passed from `llm` to the engine models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bls.engine_tensors import engine_request_tensors, parse_engine_request
from bls.llm_request import LlmRequest, llm_request_tensors, parse_llm_request
from bls.tensors import DictTensorSource, InputError, Outputs
from bls.tokenizer import StopTokenSequences
from contracts.llm_tensors import SLO_TTFT_MS
from engine.request import MAX_SLO_TTFT_MS, EngineRequest, RequestClass, SamplingParams

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def llm_request(**fields: Any) -> LlmRequest:
    return LlmRequest(prompt="hi", sampling=SamplingParams(max_tokens=4), **fields)


def engine_request(sampling: SamplingParams | None = None, **fields: Any) -> EngineRequest:
    return EngineRequest("r", (1, 2, 3), sampling or SamplingParams(max_tokens=4), **fields)


@pytest.mark.parametrize("request_class", list(RequestClass), ids=lambda c: c.value)
def test_every_class_crosses_both_edges(request_class: RequestClass) -> None:
    sent = llm_request(request_class=request_class)
    assert parse_llm_request(DictTensorSource(llm_request_tensors(sent))) == sent
    engine = engine_request(request_class=request_class)
    assert parse_engine_request("r", DictTensorSource(engine_request_tensors(engine))) == engine


@pytest.mark.parametrize("slo_ttft_ms", [1, 250, MAX_SLO_TTFT_MS])
def test_a_ttft_target_goes_from_llm_to_the_engine(slo_ttft_ms: int) -> None:
    sent = llm_request(request_class=RequestClass.PRIORITY, slo_ttft_ms=slo_ttft_ms)
    tensors = llm_request_tensors(sent)
    assert tensors[SLO_TTFT_MS.name].dtype == np.int32
    read = parse_llm_request(DictTensorSource(tensors))
    assert read.slo_ttft_ms == slo_ttft_ms
    engine = read.engine_request("r", (1, 2, 3), StopTokenSequences((), ()))
    assert (engine.slo_ttft_ms, engine.request_class) == (slo_ttft_ms, RequestClass.PRIORITY)
    assert parse_engine_request("r", DictTensorSource(engine_request_tensors(engine))) == engine


def test_without_a_target_none_is_sent_or_read() -> None:
    assert SLO_TTFT_MS.name not in llm_request_tensors(llm_request())
    assert SLO_TTFT_MS.name not in engine_request_tensors(engine_request())
    assert parse_llm_request(DictTensorSource(llm_request_tensors(llm_request()))).slo_ttft_ms is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array([0], dtype=np.int32), r"slo_ttft_ms must be in \[1, 3600000\] ms, got 0"),
        (np.array([-40], dtype=np.int32), r"slo_ttft_ms must be in \[1, 3600000\] ms, got -40"),
        (np.array([MAX_SLO_TTFT_MS + 1], dtype=np.int32), "got 3600001"),
        (np.array([1.5], dtype=np.float32), "slo_ttft_ms"),
        (np.array([b"fast"], dtype=np.object_), "slo_ttft_ms"),
    ],
)
def test_a_bad_ttft_target_is_the_callers_invalid_input_at_both_edges(value: np.ndarray, message: str) -> None:
    llm_tensors: Outputs = {**llm_request_tensors(llm_request()), SLO_TTFT_MS.name: value}
    with pytest.raises(InputError, match=message):
        parse_llm_request(DictTensorSource(llm_tensors))
    engine_tensors: Outputs = {**engine_request_tensors(engine_request()), SLO_TTFT_MS.name: value}
    with pytest.raises(InputError, match=message):
        parse_engine_request("r", DictTensorSource(engine_tensors))


def test_an_unknown_class_names_the_four() -> None:
    tensors = {**llm_request_tensors(llm_request()), "request_class": np.array([b"batch"], dtype=np.object_)}
    with pytest.raises(InputError, match="request_class must be one of priority, interactive, flex, bulk, got 'batch'"):
        parse_llm_request(DictTensorSource(tensors))


@pytest.mark.parametrize("model", ["cpu_engine", "tensorrt_llm"])
def test_the_engine_models_declare_every_input_llm_sends_them(model: str) -> None:
    """Triton refuses a request with an input its model does not declare."""
    config = text_format.Parse((REPOSITORY / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    declared = {spec.name: spec for spec in config.input}
    request = engine_request(
        sampling=SamplingParams(
            max_tokens=4, seed=1, stop_token_ids=(5,), stop_token_sequences=((6, 7),), grammar="start: /x/", logprobs=1
        ),
        request_class=RequestClass.FLEX,
        resume_token_ids=(4,),
        slo_ttft_ms=100,
    )
    sent = engine_request_tensors(request)
    assert set(sent) <= set(declared)
    slo = declared[SLO_TTFT_MS.name]
    assert (model_config_pb2.DataType.Name(slo.data_type), list(slo.dims), slo.optional) == ("TYPE_INT32", [1], True)
