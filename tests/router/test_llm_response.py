"""Reading one `llm` response from its raw contents: the values tritonclient's `as_numpy`
would give, absent outputs empty, and contents no `llm` sends refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2

from contracts.generation import GenerationDelta, Logprobs, Usage
from router.llm_response import parse_response
from tests.router.llm_responses import response_of

FULL = response_of(
    dict(
        text_output=np.array(["héllo 🚀".encode()], dtype=np.object_),
        output_token_ids=np.array([5, 6, 7], dtype=np.int32),
        finish_reason=np.array([b"length"], dtype=np.object_),
        prompt_tokens=np.array([4], dtype=np.int32),
        cached_tokens=np.array([2], dtype=np.int32),
        completion_tokens=np.array([3], dtype=np.int32),
        discarded_tokens=np.array([1], dtype=np.int32),
        output_token_logprobs=np.array([-0.5, -1.0, -1.5], dtype=np.float32),
        output_top_logprob_ids=np.array([9, 8], dtype=np.int32),
        output_top_logprobs=np.array([-0.25, -0.75], dtype=np.float32),
    )
)


def test_every_output_reads_as_tritonclient_reads_it() -> None:
    delta = parse_response(FULL)
    assert delta == GenerationDelta(
        text="héllo 🚀",
        token_ids=(5, 6, 7),
        finish_reason="length",
        usage=Usage(prompt_tokens=4, cached_tokens=2, completion_tokens=3, discarded_tokens=1),
        logprobs=Logprobs((-0.5, -1.0, -1.5), (9, 8), (-0.25, -0.75)),
        prompt_logprobs=None,
    )
    result = InferResult(FULL)  # the numpy path it replaces gives the same values
    assert delta.token_ids == tuple(result.as_numpy("output_token_ids").tolist())
    assert delta.logprobs is not None
    assert delta.logprobs.token_logprobs == tuple(result.as_numpy("output_token_logprobs").astype(float).tolist())


def test_absent_outputs_read_as_empty() -> None:
    assert parse_response(response_of({"finish_reason": np.array([b"stop"], dtype=np.object_)})) == GenerationDelta(
        finish_reason="stop"
    )
    assert parse_response(response_of({})) == GenerationDelta()


def test_text_cut_inside_a_character_is_replaced_not_refused() -> None:
    cut = response_of({"text_output": np.array(["é".encode()[:1]], dtype=np.object_)})
    assert parse_response(cut).text == "\ufffd"


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda r: r.raw_output_contents.pop(), "raw contents"),
        (lambda r: r.raw_output_contents.__setitem__(0, b"\x09\x00\x00\x00ab"), "text_output"),
        (lambda r: r.raw_output_contents.__setitem__(1, b"\x01\x00\x00"), "output_token_ids"),
    ],
    ids=["contents missing", "bytes cut short", "ints cut short"],
)
def test_contents_no_llm_sends_are_refused(mangle: Any, message: str) -> None:
    response = service_pb2.ModelInferResponse()
    response.CopyFrom(FULL)
    mangle(response)
    with pytest.raises(ValueError, match=message):
        parse_response(response)
