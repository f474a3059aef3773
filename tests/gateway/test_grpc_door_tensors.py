"""The door's translation, without a server: tensors (raw or typed contents) to the body HTTP
validates, responses in `llm`'s shape, and failures to gRPC status codes; and the door's view of
`llm`'s tensors agreeing with the HTTP path's and the BLS model's (one table)."""

from __future__ import annotations

import struct
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import InferInput, InferResult, service_pb2
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from bls.llm_request import LlmRequest, parse_llm_request
from bls.tensors import DictTensorSource
from contracts.errors import ApiError, invalid_request
from contracts.generation import BackendError, BackendUnavailable, GenerationRequest, Usage
from contracts.llm_tensors import LLM_ALWAYS_OUTPUT_NAMES, LLM_INPUTS, LLM_OUTPUT_NAMES, LLM_OUTPUTS, STREAM
from engine.request import RequestClass, SamplingParams
from gateway.grpc_door.status import door_status
from gateway.grpc_door.tensors import DOOR_INPUTS, infer_response, parse_request
from router.triton_backend import build_inputs

Tensor: Any = service_pb2.ModelInferRequest.InferInputTensor


def raw_bytes(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def request(*inputs: tuple[Any, bytes], **fields: str) -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest(model_name=fields.get("model", "small"), id=fields.get("id", ""))
    for item, raw in inputs:
        message.inputs.append(item)
        message.raw_input_contents.append(raw)
    return message


PROMPT = (Tensor(name="text_input", datatype="BYTES", shape=[1]), raw_bytes(b"hi there"))
MAX_TOKENS = (Tensor(name="max_tokens", datatype="INT32", shape=[1]), np.array([7], "<i4").tobytes())


def test_raw_tensors_become_the_body_http_validates() -> None:
    stop = (Tensor(name="stop", datatype="BYTES", shape=[2]), raw_bytes(b"\n", "é".encode()))
    top_p = (Tensor(name="top_p", datatype="FP32", shape=[1]), np.array([0.5], "<f4").tobytes())
    stream = (Tensor(name="stream", datatype="BOOL", shape=[1]), b"\x00")
    parsed = parse_request(request(PROMPT, MAX_TOKENS, stop, top_p, stream, id="r-1"))
    body = parsed.body
    assert (body.model, body.prompt, body.max_tokens, body.stop, body.top_p) == (
        "small",
        "hi there",
        7,
        ["\n", "é"],
        0.5,
    )
    assert body.request_id == "r-1" and parsed.stream is False and parsed.outputs == LLM_ALWAYS_OUTPUT_NAMES


def test_typed_contents_are_read_too() -> None:
    message = service_pb2.ModelInferRequest(model_name="small")
    message.inputs.append(
        Tensor(
            name="text_input",
            datatype="BYTES",
            shape=[1],
            contents=service_pb2.InferTensorContents(bytes_contents=[b"hi"]),
        )
    )
    message.inputs.append(
        Tensor(
            name="max_tokens", datatype="INT32", shape=[1], contents=service_pb2.InferTensorContents(int_contents=[2])
        )
    )
    assert parse_request(message).body.max_tokens == 2


@pytest.mark.parametrize(
    ("bad", "param"),
    [
        ((Tensor(name="text_input", datatype="BYTES", shape=[1]), b"\x09\x00\x00\x00hi"), "text_input"),  # cut short
        ((Tensor(name="text_input", datatype="BYTES", shape=[1]), raw_bytes(b"\xff\xfe")), "text_input"),  # not UTF-8
        ((Tensor(name="text_input", datatype="BYTES", shape=[2]), raw_bytes(b"a", b"b")), "text_input"),  # not a scalar
        ((Tensor(name="text_input", datatype="BYTES", shape=[3]), raw_bytes(b"a")), "text_input"),  # shape lies
        ((Tensor(name="max_tokens", datatype="INT32", shape=[1]), b"\x01\x00\x00"), "max_tokens"),  # 3 bytes
        ((Tensor(name="cache_namespace", datatype="BYTES", shape=[1]), raw_bytes(b"beta")), "cache_namespace"),
        ((Tensor(name="team", datatype="BYTES", shape=[1]), raw_bytes(b"beta")), "team"),
    ],
)
def test_bad_tensors_are_the_callers_400_naming_the_input(bad: tuple[Any, bytes], param: str) -> None:
    inputs = [bad] + [item for item in (PROMPT, MAX_TOKENS) if item[0].name != bad[0].name]
    with pytest.raises(ApiError) as refused:
        parse_request(request(*inputs))
    assert refused.value.status_code == 400 and refused.value.param == param and param in refused.value.message


def test_a_gateway_only_request_parameter_is_refused() -> None:
    message = request(PROMPT, MAX_TOKENS)
    message.parameters["cache_namespace"].string_param = "beta"
    with pytest.raises(ApiError) as refused:
        parse_request(message)
    assert refused.value.param == "cache_namespace"


@pytest.mark.parametrize(("tier", "request_class"), [("priority", "priority"), ("flex", "flex"), ("batch", "bulk")])
def test_the_service_tier_parameter_names_the_class(tier: str, request_class: str) -> None:
    message = request(PROMPT, MAX_TOKENS)
    message.parameters["service_tier"].string_param = tier
    assert parse_request(message).body.request_class == request_class
    message.parameters["service_tier"].string_param = "auto"
    assert parse_request(message).body.request_class is None  # the team's default


@pytest.mark.parametrize("value", ["scale", "", 3])
def test_a_bad_service_tier_parameter_is_a_400(value: Any) -> None:
    message = request(PROMPT, MAX_TOKENS)
    if isinstance(value, str):
        message.parameters["service_tier"].string_param = value
    else:
        message.parameters["service_tier"].int64_param = value
    with pytest.raises(ApiError) as refused:
        parse_request(message)
    assert refused.value.status_code == 400 and refused.value.param == "service_tier"


def test_the_service_tier_parameter_and_the_class_input_must_agree() -> None:
    message = request(
        PROMPT, MAX_TOKENS, (Tensor(name="request_class", datatype="BYTES", shape=[1]), raw_bytes(b"interactive"))
    )
    message.parameters["service_tier"].string_param = "priority"
    with pytest.raises(ApiError) as refused:
        parse_request(message)
    assert refused.value.param == "service_tier"


def test_a_response_reads_back_as_llm_s_through_tritonclient() -> None:
    usage = Usage(prompt_tokens=5, cached_tokens=2, completion_tokens=3, discarded_tokens=1)
    response = infer_response(
        "small", "r-1", LLM_OUTPUT_NAMES, text="héllo", token_ids=[1, 2, 3], finish_reason="stop", usage=usage,
        completion_tokens=3, final=True,
    )  # fmt: skip
    result = InferResult(response)
    assert result.as_numpy("text_output")[0].decode() == "héllo"
    assert result.as_numpy("output_token_ids").tolist() == [1, 2, 3]
    assert [int(result.as_numpy(n)[0]) for n in ("prompt_tokens", "cached_tokens", "discarded_tokens")] == [5, 2, 1]
    assert response.parameters["triton_final_response"].bool_param is True


@pytest.mark.parametrize(
    ("exc", "code", "retry"),
    [
        (invalid_request("max_tokens too large", "max_tokens"), grpc.StatusCode.INVALID_ARGUMENT, None),
        (ApiError(401, "authentication_error", "no key"), grpc.StatusCode.UNAUTHENTICATED, None),
        (ApiError(403, "permission_error", "not yours"), grpc.StatusCode.PERMISSION_DENIED, None),
        (ApiError(404, "not_found_error", "no such model"), grpc.StatusCode.NOT_FOUND, None),
        (
            ApiError(429, "rate_limit_error", "over share", None, {"Retry-After": "7"}),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "7",
        ),
        (ApiError(503, "service_unavailable", "full", None, {"Retry-After": "3"}), grpc.StatusCode.UNAVAILABLE, "3"),
        (BackendUnavailable("no server", retry_after_s=4), grpc.StatusCode.UNAVAILABLE, "4"),
        (BackendError("engine died"), grpc.StatusCode.INTERNAL, None),
        (RuntimeError("a bug"), grpc.StatusCode.INTERNAL, None),
    ],
)
def test_failures_map_to_one_status_each(exc: BaseException, code: grpc.StatusCode, retry: str | None) -> None:
    status = door_status(exc)
    assert status.code == code and status.retry_after_s == retry
    assert (("retry-after", retry),) == status.trailing_metadata if retry else status.trailing_metadata == ()
    if retry:
        assert f"retry after {retry} s" in status.message
    assert "a bug" not in status.message  # a gateway bug's text stays in the log


def test_a_prompt_param_is_named_as_its_tensor() -> None:
    status = door_status(invalid_request("the prompt leaves no room", "prompt"))
    assert "input 'text_input'" in status.message


# A value for every input a client may send at the door (a new public input needs one here).
EVERY_PUBLIC_INPUT: dict[str, list[Any]] = {
    "text_input": ["héllo 🚀"],
    "max_tokens": [9],
    "stop": ["\n", "END"],
    "stream": [False],
    "request_class": ["bulk"],
    "temperature": [0.5],
    "top_p": [0.75],
    "top_k": [40],
    "seed": [2**40],
    "ignore_eos": [True],
    "slo_ttft_ms": [1500],
}


def as_served(tensor: InferInput) -> Any:
    """The array the `llm` model gets for `tensor`: its wire bytes decoded as Triton does."""
    content = tensor._get_content()
    if tensor.datatype() == "BYTES":
        return deserialize_bytes_tensor(content).reshape(tensor.shape())
    return np.frombuffer(content, dtype=triton_to_np_dtype(tensor.datatype())).reshape(tensor.shape())


def test_the_door_takes_exactly_the_tables_public_inputs() -> None:
    assert list(DOOR_INPUTS.values()) == [spec for spec in LLM_INPUTS if not spec.gateway_only]
    assert {spec.name for spec in LLM_INPUTS if spec.gateway_only} == {
        "input_ids",
        "resume_token_ids",
        "cache_namespace",
        # Structured output and log-probabilities: the door takes them under TensorRT-LLM's
        # names instead (trtllm_tensors.py; tests/gateway/test_grpc_door_trtllm_tensors.py).
        "guided_grammar",
        "logprobs",
        "prompt_logprobs",
    }
    assert set(EVERY_PUBLIC_INPUT) == set(DOOR_INPUTS)


def test_every_public_input_reaches_the_bls_model_as_it_does_from_http() -> None:
    """The door's mapping, the HTTP path's (build_inputs) and the BLS model's (parse_llm_request)
    are one table: each input a client sends at the door fills the body field the table names,
    the HTTP path sends that field under the same tensor, and `llm` reads it back unchanged."""
    message = service_pb2.ModelInferRequest(model_name="small")
    for name, values in EVERY_PUBLIC_INPUT.items():
        spec = DOOR_INPUTS[name]
        sent = InferInput(name, [len(values)], spec.datatype)  # tritonclient's own encoding
        sent.set_data_from_numpy(spec.array(values))
        message.inputs.append(Tensor(name=name, datatype=spec.datatype, shape=[len(values)]))
        message.raw_input_contents.append(sent._get_content())
    parsed = parse_request(message)
    fields = {
        spec.request_field: getattr(parsed.body, spec.request_field)
        for spec in DOOR_INPUTS.values()
        if spec is not STREAM
    }
    for spec in DOOR_INPUTS.values():
        value = parsed.stream if spec is STREAM else fields[spec.request_field]
        assert (list(value) if spec.is_list else [value]) == EVERY_PUBLIC_INPUT[spec.name], spec.name
    request = GenerationRequest(request_id="r-1", model_id="small", **(fields | {"stop": tuple(fields["stop"])}))
    served = {tensor.name(): as_served(tensor) for tensor in build_inputs(request)}
    assert parse_llm_request(DictTensorSource(served)) == LlmRequest(
        prompt="héllo 🚀",
        sampling=SamplingParams(max_tokens=9, temperature=0.5, top_p=0.75, top_k=40, seed=2**40, ignore_eos=True),
        stops=("\n", "END"),
        stream=True,  # the gateway always streams from its servers; the door's `stream` is its own reply
        request_class=RequestClass.BULK,
        slo_ttft_ms=1500,
    )


def test_responses_carry_the_tables_outputs_with_their_datatypes_and_shapes() -> None:
    usage = Usage(prompt_tokens=5, cached_tokens=2, completion_tokens=3, discarded_tokens=1)
    response = infer_response(
        "small", "r-1", LLM_OUTPUT_NAMES, text="a", token_ids=[1, 2, 3], finish_reason="", usage=usage,
        completion_tokens=3, final=None,
    )  # fmt: skip
    assert [(t.name, t.datatype, list(t.shape)) for t in response.outputs] == [
        (spec.name, spec.datatype, [3] if spec.is_list else [1]) for spec in LLM_OUTPUTS if not spec.when_asked
    ]  # `llm`'s log-probabilities (`when_asked`) are the gateway's; the door sends TensorRT-LLM's
    assert "triton_final_response" not in response.parameters
    only = infer_response(
        "small", "r-1", ("finish_reason", "text_output"), text="a", token_ids=[], finish_reason="stop", usage=usage,
        completion_tokens=0, final=True,
    )  # fmt: skip
    assert [t.name for t in only.outputs] == ["text_output", "finish_reason"]  # in `llm`'s order


def test_huge_names_at_the_door_are_echoed_as_a_prefix() -> None:
    huge = "n" * 1_000_000
    unknown_input = request(PROMPT, MAX_TOKENS, (Tensor(name=huge, datatype="INT32", shape=[1]), b"\0\0\0\0"))
    unknown_parameter = request(PROMPT, MAX_TOKENS)
    unknown_parameter.parameters[huge].string_param = "x"
    unknown_output = request(PROMPT, MAX_TOKENS)
    unknown_output.outputs.add(name=huge)
    for message in (unknown_input, unknown_parameter, unknown_output):
        with pytest.raises(ApiError) as refused:
            parse_request(message)
        assert len(refused.value.message) < 400 and "(1,000,000 characters)" in refused.value.message
        assert refused.value.param == huge[:64]
