"""The `llm` model's inputs (docs/tensors.md), read and validated once at the edge."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bls.engine_tensors import read_request_class, read_sampling
from bls.tensors import (
    InputError,
    Outputs,
    TensorSource,
    bool_scalar,
    bytes_tensor,
    fp32_scalar,
    int32_scalar,
    int32_tensor,
    int64_scalar,
    read_bool,
    read_int_list,
    read_str,
    read_str_list,
    text_tensor,
)
from bls.tokenizer import StopTokenSequences
from engine.request import EngineRequest, RequestClass, SamplingParams


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """One request to `llm`: text in, text out."""

    prompt: str
    sampling: SamplingParams  # without stop sequences: preprocessing makes those from `stops`
    stops: tuple[str, ...] = ()
    stream: bool = True
    request_class: RequestClass = RequestClass.INTERACTIVE
    resume_token_ids: tuple[int, ...] = ()
    cache_namespace: str = ""

    def engine_request(self, request_id: str, input_ids: tuple[int, ...], stops: StopTokenSequences) -> EngineRequest:
        """The engine request for this reply, once preprocessing has tokenized it."""
        return EngineRequest(
            request_id=request_id,
            prompt_token_ids=input_ids,
            sampling=replace(self.sampling, stop_token_sequences=stops.sequences()),
            request_class=self.request_class,
            resume_token_ids=self.resume_token_ids,
            cache_namespace=self.cache_namespace,
        )


def parse_llm_request(src: TensorSource) -> LlmRequest:
    """Read one `llm` request; InputError names the input that is wrong."""
    prompt = read_str(src, "text_input")
    if not prompt:
        raise InputError("text_input must not be empty")
    if src.get("stop_token_ids") is not None:
        raise InputError("llm takes stop strings in 'stop', not 'stop_token_ids'")
    return LlmRequest(
        prompt=prompt,
        sampling=read_sampling(src, StopTokenSequences((), ())),
        stops=tuple(s for s in read_str_list(src, "stop") if s),
        stream=read_bool(src, "stream", True),
        request_class=read_request_class(src),
        resume_token_ids=read_int_list(src, "resume_token_ids"),
        cache_namespace=read_str(src, "cache_namespace", ""),
    )


def llm_request_tensors(request: LlmRequest) -> Outputs:
    """The tensors a client sends to `llm` for `request` (tests and in-process callers)."""
    sampling = request.sampling
    tensors: Outputs = {
        "text_input": text_tensor(request.prompt),
        "max_tokens": int32_scalar(sampling.max_tokens),
        "stream": bool_scalar(request.stream),
        "request_class": text_tensor(request.request_class.value),
        "temperature": fp32_scalar(sampling.temperature),
        "top_p": fp32_scalar(sampling.top_p),
        "top_k": int32_scalar(sampling.top_k),
        "ignore_eos": bool_scalar(sampling.ignore_eos),
        "cache_namespace": text_tensor(request.cache_namespace),
    }
    if request.stops:
        tensors["stop"] = bytes_tensor(request.stops)
    if sampling.seed is not None:
        tensors["seed"] = int64_scalar(sampling.seed)
    if request.resume_token_ids:
        tensors["resume_token_ids"] = int32_tensor(request.resume_token_ids)
    return tensors
