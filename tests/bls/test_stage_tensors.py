"""The tensor contracts of preprocessing, postprocessing and the engine: both directions agree."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bls.engine_tensors import (
    cancel_request_tensors,
    engine_output_tensors,
    engine_request_tensors,
    parse_engine_output,
    parse_engine_request,
    read_cancel_target,
)
from bls.llm_request import LlmRequest, llm_request_tensors, parse_llm_request
from bls.postprocessing import (
    Postprocessor,
    PostprocessState,
    parse_postprocess_outputs,
    postprocess_inputs,
)
from bls.preprocessing import Preprocessor, parse_preprocess_outputs, preprocess_inputs
from bls.tensors import DictTensorSource, InputError, int32_scalar
from bls.tokenizer import PromptTokenizer
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams, TokenLogprobs


def test_preprocessing_round_trip(tokenizer: PromptTokenizer) -> None:
    outputs = Preprocessor(tokenizer).execute(DictTensorSource(preprocess_inputs("Hello world", ["\n", "Stop"])))
    result = parse_preprocess_outputs(DictTensorSource(outputs))
    assert result.input_ids == tuple(tokenizer.encode_prompt("Hello world"))
    assert result.stop_sequences.sequences() == (
        tuple(tokenizer.encode_stop("\n")),
        tuple(tokenizer.encode_stop("Stop")),
    )


def test_postprocessing_round_trip_carries_state(tokenizer: PromptTokenizer) -> None:
    post = Postprocessor(tokenizer)
    ids = tokenizer.encode_stop("Hello world. Stop here")
    state, text = PostprocessState(), ""
    for end in range(1, len(ids) + 1):
        inputs = postprocess_inputs(ids[:end], state, ["Stop"], is_final=end == len(ids))
        result = parse_postprocess_outputs(DictTensorSource(post.execute(DictTensorSource(inputs))))
        text += result.text
        state = result.state
        if result.stop_hit:
            break
    assert result.stop_hit
    assert text == "Hello world. "


def test_engine_request_round_trip() -> None:
    request = EngineRequest(
        request_id="r1",
        prompt_token_ids=(1, 5, 6),
        sampling=SamplingParams(
            max_tokens=9,
            temperature=0.5,
            top_p=0.9,
            top_k=4,
            seed=123,
            ignore_eos=True,
            stop_token_ids=(7,),
            stop_token_sequences=((8, 9), (10,)),
        ),
        request_class=RequestClass.BULK,
        resume_token_ids=(11, 12),
        cache_namespace="team-a",
    )
    parsed = parse_engine_request("r1", DictTensorSource(engine_request_tensors(request)))
    assert parsed.sampling.top_p == pytest.approx(0.9)  # FP32 on the wire
    assert parsed == replace(request, sampling=replace(request.sampling, top_p=parsed.sampling.top_p))


def test_engine_request_defaults_and_errors() -> None:
    base = {"input_ids": np.array([1, 2], dtype=np.int32), "max_tokens": int32_scalar(3)}
    parsed = parse_engine_request("r", DictTensorSource(base))
    assert parsed.sampling == SamplingParams(max_tokens=3)
    assert parsed.request_class is RequestClass.INTERACTIVE
    with pytest.raises(InputError, match="max_tokens must be at least 1"):
        parse_engine_request("r", DictTensorSource({**base, "max_tokens": int32_scalar(0)}))
    with pytest.raises(InputError, match="input_ids"):
        parse_engine_request("r", DictTensorSource({"max_tokens": int32_scalar(3)}))
    with pytest.raises(InputError, match="vocabulary"):
        parse_engine_request("r", DictTensorSource(base), vocab_size=2)


def test_cancel_control_request() -> None:
    assert read_cancel_target(DictTensorSource(cancel_request_tensors("abc"))) == "abc"
    assert read_cancel_target(DictTensorSource({})) is None


def test_engine_output_round_trip() -> None:
    for output in (
        RequestOutput("r", (4, 5), False, None, 3, 0, 2),
        RequestOutput("r", (), True, FinishReason.CANCELLED, 3, 1, 2),
    ):
        assert parse_engine_output("r", DictTensorSource(engine_output_tensors(output)), final=False) == output


def test_llm_request_round_trip_and_validation() -> None:
    request = LlmRequest(
        prompt="hi",
        sampling=SamplingParams(max_tokens=4, seed=3),
        stops=("\n",),
        stream=False,
        request_class=RequestClass.BULK,
        resume_token_ids=(5,),
        cache_namespace="t",
    )
    assert parse_llm_request(DictTensorSource(llm_request_tensors(request))) == request
    bad = llm_request_tensors(request)
    bad["request_class"] = np.array([b"urgent"], dtype=np.object_)
    with pytest.raises(InputError, match="request_class must be one of"):
        parse_llm_request(DictTensorSource(bad))


def test_engine_output_round_trip_with_logprobs_and_requests_carry_the_new_inputs() -> None:
    sampling = SamplingParams(max_tokens=4, grammar="start: /[0-9]+/", logprobs=2, prompt_logprobs=1)
    output = RequestOutput(
        "r", (4, 5), False, None, 3, 0, 2,
        logprobs=TokenLogprobs((-0.5, -0.25), (4, 1, 5, 2), (-0.5, -1.5, -0.25, -3.0), 2),
        prompt_logprobs=TokenLogprobs((-2.0, -1.0), (7, 8), (-1.0, -0.5), 1),
    )  # fmt: skip
    tensors = engine_output_tensors(output)
    assert parse_engine_output("r", DictTensorSource(tensors), final=False, sampling=sampling) == output
    plain = engine_output_tensors(RequestOutput("r", (4,), False, None, 3, 0, 1))
    assert not any("logprob" in name for name in plain)  # nothing when not asked
    request = EngineRequest("r", (1, 2), sampling)
    assert parse_engine_request("r", DictTensorSource(engine_request_tensors(request))) == request
