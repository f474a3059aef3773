"""TensorRT-LLM's guided decoding and log-probability tensors at the door, without a server:
each guide type becomes the grammar the HTTP routes would build (and that compiles), every bad
value is the caller's 400 naming its input (INVALID_ARGUMENT), and the log-probability outputs
read back through tritonclient in TensorRT-LLM's datatypes and shapes."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2

from contracts.errors import ApiError
from contracts.generation import Logprobs, Usage
from contracts.guided_grammar import GrammarChecker, json_object_grammar, json_schema_grammar, regex_grammar
from contracts.llm_tensors import LLM_ALWAYS_OUTPUT_NAMES
from gateway.grpc_door.models import model_config, model_metadata
from gateway.grpc_door.status import door_status
from gateway.grpc_door.tensors import infer_response, parse_request
from gateway.grpc_door.trtllm_tensors import MAX_GUIDE_BYTES, Guide, output_log_probs

Tensor: Any = service_pb2.ModelInferRequest.InferInputTensor
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def raw_bytes(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def text(name: str, value: str | bytes, shape: list[int] | None = None) -> tuple[Any, bytes]:
    data = value.encode() if isinstance(value, str) else value
    return Tensor(name=name, datatype="BYTES", shape=shape or [1]), raw_bytes(data)


def flag(name: str, value: bool) -> tuple[Any, bytes]:
    return Tensor(name=name, datatype="BOOL", shape=[1]), bytes([value])


PROMPT = text("text_input", "hi there")
MAX_TOKENS = (Tensor(name="max_tokens", datatype="INT32", shape=[1]), np.array([7], "<i4").tobytes())


def request(*inputs: tuple[Any, bytes], outputs: tuple[str, ...] = (), version: str = "") -> Any:
    message = service_pb2.ModelInferRequest(model_name="small", model_version=version)
    for item, raw in (PROMPT, MAX_TOKENS, *inputs):
        message.inputs.append(item)
        message.raw_input_contents.append(raw)
    for name in outputs:
        message.outputs.add(name=name)
    return message


def guided(guide_type: str, guide: str | None = None) -> Any:
    inputs = [text("guided_decoding_guide_type", guide_type)]
    return request(*inputs, *([text("guided_decoding_guide", guide)] if guide is not None else []))


@pytest.mark.parametrize(
    ("guide_type", "guide", "grammar"),
    [
        ("json", None, json_object_grammar()),  # TensorRT-LLM's llguidance backend: any JSON object
        ("json", "", json_object_grammar()),
        ("json_schema", json.dumps(SCHEMA), json_schema_grammar(SCHEMA)),  # every keyword enforced
        ("regex", "[0-9]{4}", regex_grammar("[0-9]{4}")),
        ("ebnf_grammar", 'start: "yes" | "no"', 'start: "yes" | "no"'),  # llguidance's Lark as it is
    ],
)
def test_each_guide_type_is_the_grammar_the_http_routes_build(guide_type: str, guide: str | None, grammar: str) -> None:
    parsed = parse_request(guided(guide_type, guide))
    assert parsed.guide == Guide(guide_type, guide or "")
    assert parsed.guide.grammar() == grammar
    assert GrammarChecker().problem(grammar) is None


def test_gbnf_from_nvidias_examples_becomes_lark_that_compiles() -> None:
    """NVIDIA's xgrammar examples send GBNF (`root ::= [0-9]+`); llguidance's converter reads it."""
    grammar = Guide("ebnf_grammar", "root ::= [0-9]+").grammar()
    assert "start" in grammar and GrammarChecker().problem(grammar) is None


@pytest.mark.parametrize(
    ("inputs", "param"),
    [
        (
            [text("guided_decoding_guide_type", "xml"), text("guided_decoding_guide", "<a/>")],
            "guided_decoding_guide_type",
        ),
        ([text("guided_decoding_guide_type", "structural_tag")], "guided_decoding_guide_type"),  # xgrammar's only
        ([text("guided_decoding_guide", json.dumps(SCHEMA))], "guided_decoding_guide"),  # a guide without its type
        ([text("guided_decoding_guide_type", "json_schema")], "guided_decoding_guide"),  # a type without its guide
        ([text("guided_decoding_guide_type", "regex"), text("guided_decoding_guide", "")], "guided_decoding_guide"),
        ([text("guided_decoding_guide_type", "json"), text("guided_decoding_guide", "{}")], "guided_decoding_guide"),
        (
            [text("guided_decoding_guide_type", "regex"), text("guided_decoding_guide", "a" * (MAX_GUIDE_BYTES + 1))],
            "guided_decoding_guide",
        ),  # oversized
        (
            [(Tensor(name="guided_decoding_guide_type", datatype="INT32", shape=[1]), b"\0\0\0\0")],
            "guided_decoding_guide_type",
        ),  # wrong dtype
        ([(Tensor(name="return_log_probs", datatype="INT32", shape=[1]), b"\1\0\0\0")], "return_log_probs"),
        ([text("guided_decoding_guide_type", b"\xff\xfe")], "guided_decoding_guide_type"),  # not UTF-8
        (
            [(Tensor(name="guided_decoding_guide_type", datatype="BYTES", shape=[2]), raw_bytes(b"json", b"regex"))],
            "guided_decoding_guide_type",
        ),  # not a scalar
        ([flag("return_log_probs", True), flag("return_log_probs", True)], "return_log_probs"),  # given twice
    ],
)
def test_bad_values_are_invalid_argument_naming_the_input(inputs: list[tuple[Any, bytes]], param: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_request(request(*inputs))
    assert refused.value.status_code == 400 and refused.value.param == param
    status = door_status(refused.value)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT and param in status.message


@pytest.mark.parametrize(
    "guide",
    [
        Guide("json_schema", '{"type": "object",'),  # not JSON
        Guide("json_schema", "[1, 2]"),  # JSON, not a schema object
        Guide("json_schema", '{"type": "number", "maximum": NaN}'),  # not JSON's own number
        Guide("json_schema", "[" * 100_000 + "]" * 100_000),  # nested past Python's parser
        Guide("ebnf_grammar", "root ::= ([0-9]"),  # GBNF that does not parse
        Guide("ebnf_grammar", "root ::= digits"),  # GBNF naming a rule it lacks
    ],
)
def test_a_guide_that_is_not_one_of_its_type_is_invalid_argument(guide: Guide) -> None:
    with pytest.raises(ApiError) as refused:
        guide.grammar()
    assert refused.value.status_code == 400 and refused.value.param == "guided_decoding_guide"
    assert len(refused.value.message) < 400


def test_a_model_version_the_door_lacks_is_not_found() -> None:
    assert parse_request(request(version="1")).body.model == "small"
    with pytest.raises(ApiError) as refused:
        parse_request(request(version="7"))
    assert door_status(refused.value).code == grpc.StatusCode.NOT_FOUND


def test_log_prob_outputs_are_sent_only_when_asked_for() -> None:
    assert parse_request(request()).outputs == LLM_ALWAYS_OUTPUT_NAMES
    every = parse_request(request(flag("return_log_probs", True)))
    assert every.log_probs and every.outputs == (*LLM_ALWAYS_OUTPUT_NAMES, "output_log_probs", "cum_log_probs")
    named = parse_request(request(flag("return_log_probs", True), outputs=("cum_log_probs", "text_output")))
    assert named.outputs == ("text_output", "cum_log_probs")
    with pytest.raises(ApiError) as refused:  # TensorRT-LLM's outputs without its input
        parse_request(request(outputs=("output_log_probs",)))
    assert refused.value.param == "return_log_probs"
    with pytest.raises(ApiError):  # `llm`'s own are the gateway's: not the door's to send
        parse_request(request(flag("return_log_probs", True), outputs=("output_token_logprobs",)))


def test_log_probs_read_back_in_tensorrt_llms_shapes() -> None:
    usage = Usage(prompt_tokens=5, cached_tokens=0, completion_tokens=3, discarded_tokens=0)
    values = output_log_probs([4, 5, 6], Logprobs(token_logprobs=(-0.5, -1.25, -0.125)))
    response = infer_response(
        "small", "r-1", (*LLM_ALWAYS_OUTPUT_NAMES, "output_log_probs", "cum_log_probs"), text="abc",
        token_ids=[4, 5, 6], finish_reason="", usage=usage, completion_tokens=3, final=False,
        log_probs=(values, -2.0),
    )  # fmt: skip
    result = InferResult(response)
    per_token, cumulative = result.as_numpy("output_log_probs"), result.as_numpy("cum_log_probs")
    assert per_token.dtype == np.float32 and per_token.shape == (1, 3)  # (beam, token)
    assert per_token.tolist() == [[-0.5, -1.25, -0.125]]
    assert cumulative.dtype == np.float32 and cumulative.tolist() == [-2.0]  # (beam,)


def test_tokens_without_kept_log_probs_stay_lined_up_as_nan() -> None:
    """A reply read back from another gateway's record may lack them: NaN, never a shorter list."""
    assert all(math.isnan(v) for v in output_log_probs([1, 2], None))
    assert output_log_probs([], None) == []


def test_metadata_and_config_declare_tensorrt_llms_tensors() -> None:
    metadata = model_metadata("small")
    inputs = {t.name: (t.datatype, list(t.shape)) for t in metadata.inputs}
    outputs = {t.name: (t.datatype, list(t.shape)) for t in metadata.outputs}
    assert inputs["guided_decoding_guide_type"] == inputs["guided_decoding_guide"] == ("BYTES", [1])
    assert inputs["return_log_probs"] == ("BOOL", [1])
    assert outputs["output_log_probs"] == ("FP32", [-1, -1]) and outputs["cum_log_probs"] == ("FP32", [-1])
    assert "output_token_logprobs" not in outputs  # never sent by the door: not declared
    config = model_config("small").config
    optional = {item.name: item.optional for item in config.input}
    assert optional["guided_decoding_guide_type"] and optional["guided_decoding_guide"] and optional["return_log_probs"]
    assert [item.name for item in config.output][-2:] == ["output_log_probs", "cum_log_probs"]
