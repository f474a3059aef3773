"""The `llm` contract holds end to end: what the gateway sends is what the BLS model reads, what
the BLS model answers is what the gateway reads, and config.pbtxt declares the same tensors.

Each side is tested alone elsewhere (tests/router/test_triton_backend.py, tests/bls/); here
the gateway's real tensors go through the BLS model's real parser, so renaming or retyping a
tensor on one side only fails. The gRPC door's view of the same table is held to it in
tests/gateway/test_grpc_door_tensors.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import InferInput, model_config_pb2
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from bls.llm_pipeline import LlmPipeline
from bls.llm_request import LlmRequest, parse_llm_request
from bls.postprocessing import PostprocessResult, PostprocessState
from bls.preprocessing import Preprocessed
from bls.tensors import Array, DictTensorSource, Outputs
from bls.tokenizer import StopTokenSequences
from contracts.generation import GenerationDelta, GenerationRequest, Logprobs, Usage
from contracts.llm_tensors import (
    INPUT_IDS,
    LLM_ALWAYS_OUTPUT_NAMES,
    LLM_INPUTS,
    LLM_OUTPUT_NAMES,
    LLM_OUTPUTS,
    PROMPT_TOKENS,
    SEED,
    STREAM,
    TEXT_INPUT,
    TOP_K,
    LlmTensor,
)
from contracts.schemas import GenerateBody
from contracts.token_ids import PackedTokenIds
from engine.request import EngineRequest, FinishReason, RequestClass, RequestOutput, SamplingParams, TokenLogprobs
from router.llm_response import parse_response
from router.triton_backend import build_inputs
from tests.router.llm_responses import response_of

LLM_CONFIG = Path(__file__).resolve().parents[2] / "model_repository" / "llm" / "config.pbtxt"

EVERY_OPTION = GenerationRequest(
    request_id="r1",
    model_id="small",
    prompt="héllo 🚀",
    max_tokens=9,
    stop=("\n", "END"),
    request_class="bulk",
    temperature=0.5,
    top_p=0.75,
    top_k=40,
    seed=2**40,
    ignore_eos=True,
    resume_token_ids=(3, 4),
    cache_namespace="team-a",
    guided_grammar='start: %json {"type":"object"}',
    logprobs=5,
    prompt_logprobs=1,
    slo_ttft_ms=800,
)
# What the gateway sends: the prompt as the token ids it encoded, in the text's place.
TOKENIZED = dataclasses.replace(EVERY_OPTION, prompt_token_ids=PackedTokenIds.pack((1, 7, 8, 9)))


def as_served(tensor: InferInput) -> Array:
    """The array the `llm` model gets for `tensor`: its wire bytes decoded as Triton does."""
    content = tensor._get_content()
    if tensor.datatype() == "BYTES":
        array: Array = deserialize_bytes_tensor(content)
    else:
        array = np.frombuffer(content, dtype=triton_to_np_dtype(tensor.datatype()))
    return array.reshape(tensor.shape())


def served(request: GenerationRequest) -> dict[str, Array]:
    return {t.name(): as_served(t) for t in build_inputs(request)}


def test_every_field_the_gateway_sends_arrives_in_the_bls_model() -> None:
    assert parse_llm_request(DictTensorSource(served(EVERY_OPTION))) == LlmRequest(
        prompt="héllo 🚀",
        sampling=SamplingParams(
            max_tokens=9,
            temperature=0.5,
            top_p=0.75,
            top_k=40,
            seed=2**40,
            ignore_eos=True,
            grammar='start: %json {"type":"object"}',
            logprobs=5,
            prompt_logprobs=1,
        ),
        stops=("\n", "END"),
        stream=True,
        request_class=RequestClass.BULK,
        resume_token_ids=(3, 4),
        cache_namespace="team-a",
        slo_ttft_ms=800,
    )


def test_a_tokenized_prompt_arrives_as_its_ids_instead_of_its_text() -> None:
    assert parse_llm_request(DictTensorSource(served(TOKENIZED))) == dataclasses.replace(
        parse_llm_request(DictTensorSource(served(EVERY_OPTION))), prompt="", prompt_token_ids=(1, 7, 8, 9)
    )


def test_a_plain_request_reads_as_the_models_defaults() -> None:
    plain = GenerationRequest(request_id="r2", model_id="small", prompt="hi", max_tokens=3)
    assert parse_llm_request(DictTensorSource(served(plain))) == LlmRequest(
        prompt="hi", sampling=SamplingParams(max_tokens=3)
    )


def test_the_gateway_sends_every_input_with_the_tables_types() -> None:
    as_text, as_ids = ({t.name(): t for t in build_inputs(request)} for request in (EVERY_OPTION, TOKENIZED))
    # The prompt goes once: as its ids when the gateway has them, else as text.
    assert set(as_text) - set(as_ids) == {TEXT_INPUT.name} and set(as_ids) - set(as_text) == {INPUT_IDS.name}
    inputs = as_text | as_ids
    assert set(inputs) == {spec.name for spec in LLM_INPUTS}
    for spec in LLM_INPUTS:
        tensor = inputs[spec.name]
        assert tensor.datatype() == spec.datatype, spec.name
        assert as_served(tensor).dtype == np.dtype(spec.dtype), spec.name
        assert (tensor.shape() == [1]) != spec.is_list, spec.name


def wire_datatype(data_type: int) -> str:
    datatype = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if datatype == "STRING" else datatype  # config.pbtxt's TYPE_STRING is BYTES on the wire


def test_config_pbtxt_declares_the_tables_tensors() -> None:
    config = text_format.Parse(LLM_CONFIG.read_text(), model_config_pb2.ModelConfig())
    assert [(t.name, wire_datatype(t.data_type), list(t.dims), not t.optional) for t in config.input] == [
        (spec.name, spec.datatype, [-1] if spec.is_list else [1], spec.required) for spec in LLM_INPUTS
    ]
    assert [(t.name, wire_datatype(t.data_type), list(t.dims)) for t in config.output] == [
        (spec.name, spec.datatype, [-1] if spec.is_list else [1]) for spec in LLM_OUTPUTS
    ]
    assert tuple(spec.name for spec in LLM_OUTPUTS) == LLM_OUTPUT_NAMES


def test_each_input_names_the_request_field_it_carries() -> None:
    """`field` is the attribute of the gateway's GenerationRequest (what build_inputs sends) and
    of GenerateBody (what the gRPC door fills); `stream` is the door's alone, since the gateway
    always streams from its servers, and the gateway-only inputs are never a client's."""
    request_fields = {f.name for f in dataclasses.fields(GenerationRequest)}
    for spec in LLM_INPUTS:
        assert (spec.request_field in request_fields) == (spec is not STREAM), spec.name
        assert (spec.request_field in GenerateBody.model_fields) == (not spec.gateway_only), spec.name
    assert [spec.name for spec in LLM_INPUTS if spec.gateway_only] == [
        "input_ids",
        "resume_token_ids",
        "cache_namespace",
        # Until /v1/generate's body has them (docs/openai.md): the gateway alone sets them today.
        "guided_grammar",
        "logprobs",
        "prompt_logprobs",
    ]


@pytest.mark.parametrize("spec", [*LLM_INPUTS, *LLM_OUTPUTS], ids=lambda spec: spec.name)
def test_each_tensors_array_has_its_dtype_and_shape(spec: LlmTensor) -> None:
    sample: dict[str, str | int | float | bool] = {"BYTES": "é", "INT32": 7, "INT64": 2**40, "FP32": 0.5, "BOOL": True}
    values = [sample[spec.datatype]] * (3 if spec.is_list else 1)
    array = spec.array(values)
    assert array.dtype == np.dtype(spec.dtype) and array.shape == (len(values),)
    if spec.is_list:
        assert spec.array([]).shape == (0,)
    else:
        with pytest.raises(ValueError, match=rf"llm (input|output) '{spec.name}' is a scalar"):
            spec.array(values * 2)


def test_a_value_its_dtype_cannot_hold_is_refused_naming_the_tensor() -> None:
    with pytest.raises(ValueError, match=r"llm input 'top_k' \(INT32\) cannot hold 2147483648"):
        TOP_K.array([2**31])
    with pytest.raises(ValueError, match=r"llm output 'prompt_tokens' \(INT32\) cannot hold -2147483649"):
        PROMPT_TOKENS.array([-(2**31) - 1])
    assert SEED.array([2**63 - 1]).tolist() == [2**63 - 1]
    with pytest.raises(ValueError, match="llm input 'seed'"):
        SEED.array([2**63])


class OneResponseStages:
    """Stages whose engine writes `token_ids` in one finished output, detokenized as `text`."""

    def __init__(self, token_ids: tuple[int, ...], text: str) -> None:
        self.token_ids, self.text = token_ids, text

    async def preprocess(self, prompt: str, stops: Sequence[str]) -> Preprocessed:
        return Preprocessed((1, 7, 8, 9), StopTokenSequences((), ()))

    def preprocess_tokenized(self, input_ids: tuple[int, ...], stops: Sequence[str]) -> Preprocessed:
        return Preprocessed(input_ids, StopTokenSequences((), ()))

    async def generate(self, request: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        n, k = len(self.token_ids), request.sampling.logprobs
        logprobs = (
            None
            if k is None
            else TokenLogprobs(tuple(-0.5 * (i + 1) for i in range(n)), tuple(range(n * k)), (-0.25,) * (n * k), k)
        )
        prompt = None
        if request.sampling.prompt_logprobs is not None:  # 1 alternative each, for prompt tokens 1..3
            prompt = TokenLogprobs((-2.0, -3.0, -4.0), (1, 2, 3), (-1.0, -2.0, -3.0), 1)
        yield RequestOutput(
            request.request_id,
            self.token_ids,
            True,
            FinishReason.LENGTH,
            4,
            2,
            n,
            logprobs=logprobs,
            prompt_logprobs=prompt,
        )

    async def cancel(self, request_id: str) -> None:
        raise AssertionError("nothing to cancel")

    async def postprocess(
        self, token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
    ) -> PostprocessResult:
        return PostprocessResult(self.text, state, stop_hit=False, reply_tokens=len(token_ids))


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[Outputs | None, bool, str | None]] = []

    def send(self, outputs: Outputs | None, *, final: bool, error: str | None = None) -> None:
        self.sent.append((outputs, final, error))

    def is_cancelled(self) -> bool:
        return False


@pytest.mark.parametrize(
    "request_",
    [EVERY_OPTION, TOKENIZED, dataclasses.replace(EVERY_OPTION, resume_token_ids=())],
    ids=["text", "token-ids", "not-resumed"],
)
async def test_what_the_bls_model_answers_the_gateway_reads(request_: GenerationRequest) -> None:
    """Log-probabilities included: the request asks for 5 alternatives a token and the prompt's,
    which only a reply that is not resumed gets (the server before sent them with its first token)."""
    sink = Sink()
    stages = OneResponseStages((5, 6, 7), "héllo")
    await LlmPipeline(stages).run("r1", DictTensorSource(served(request_)), sink)
    [(outputs, final, error)] = sink.sent
    assert final and error is None and outputs is not None
    resumed = bool(request_.resume_token_ids)
    assert tuple(outputs) == tuple(
        n for n in LLM_OUTPUT_NAMES if not (resumed and n.startswith("prompt_") and "logprob" in n)
    )
    for spec in LLM_OUTPUTS:
        if spec.name not in outputs:
            continue
        assert outputs[spec.name].dtype == np.dtype(spec.dtype) and outputs[spec.name].ndim == 1, spec.name
    assert parse_response(response_of(outputs)) == GenerationDelta(
        text="héllo",
        token_ids=(5, 6, 7),
        finish_reason="length",
        usage=Usage(4, 2, 3),
        logprobs=Logprobs((-0.5, -1.0, -1.5), tuple(range(15)), (-0.25,) * 15),
        prompt_logprobs=None if resumed else Logprobs((-2.0, -3.0, -4.0), (1, 2, 3), (-1.0, -2.0, -3.0)),
    )


async def test_a_request_that_does_not_ask_gets_no_logprob_tensors() -> None:
    plain = GenerationRequest(request_id="r2", model_id="small", prompt="hi", max_tokens=3)
    sink = Sink()
    await LlmPipeline(OneResponseStages((5, 6, 7), "héllo")).run("r2", DictTensorSource(served(plain)), sink)
    [(outputs, _, _)] = sink.sent
    assert outputs is not None and tuple(outputs) == LLM_ALWAYS_OUTPUT_NAMES
    delta = parse_response(response_of(outputs))
    assert delta.logprobs is None and delta.prompt_logprobs is None
