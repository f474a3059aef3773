"""The `cpu_engine` tensor contract, both directions (docs/tensors.md).

`llm` turns an `EngineRequest` into tensors and reads `RequestOutput`s back; `cpu_engine`
does the opposite. Keeping both sides in one file keeps them from drifting, and a round trip
is a unit test. `tensorrt_llm` on GPUs takes the same inputs.
"""

from __future__ import annotations

from bls.logprob_tensors import OUTPUT_LOGPROB_NAMES, PROMPT_LOGPROB_NAMES, logprob_tensors, read_logprobs
from bls.tensors import (
    InputError,
    Outputs,
    TensorSource,
    bool_scalar,
    fp32_scalar,
    int32_scalar,
    int32_tensor,
    int64_scalar,
    read_bool,
    read_float,
    read_int,
    read_int_list,
    read_optional_int,
    read_str,
    text_tensor,
)
from bls.tokenizer import StopTokenSequences
from contracts.llm_tensors import (
    GUIDED_GRAMMAR,
    LOGPROBS,
    OUTPUT_LOGPROB_TENSORS,
    PROMPT_LOGPROB_TENSORS,
    PROMPT_LOGPROBS,
    SLO_TTFT_MS,
)
from engine.request import (
    MAX_LOGPROBS,
    MAX_SLO_TTFT_MS,
    EngineRequest,
    FinishReason,
    RequestClass,
    RequestOutput,
    SamplingParams,
)

CANCEL_INPUT = "cancel_request_id"
ENGINE_OUTPUT_NAMES = (
    "output_token_ids",
    "finish_reason",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    # Only in the responses of a request that asked (bls/logprob_tensors.py).
    *OUTPUT_LOGPROB_NAMES,
    *PROMPT_LOGPROB_NAMES,
)


def read_request_class(src: TensorSource) -> RequestClass:
    """One of the four classes (priority, interactive, flex, bulk); interactive when left out."""
    name = read_str(src, "request_class", RequestClass.INTERACTIVE.value)
    try:
        return RequestClass(name)
    except ValueError:
        choices = ", ".join(c.value for c in RequestClass)
        raise InputError(f"request_class must be one of {choices}, got {name!r}") from None


def read_slo_ttft_ms(src: TensorSource) -> int | None:
    """The caller's first-token target in ms (1..MAX_SLO_TTFT_MS), or None without one."""
    target = read_optional_int(src, SLO_TTFT_MS.name)
    if target is not None and not 0 < target <= MAX_SLO_TTFT_MS:
        raise InputError(f"{SLO_TTFT_MS.name} must be in [1, {MAX_SLO_TTFT_MS}] ms, got {target}")
    return target


def read_sampling(src: TensorSource, stop_sequences: StopTokenSequences) -> SamplingParams:
    """Sampling inputs shared by `llm` and `cpu_engine`, validated."""
    max_tokens = read_int(src, "max_tokens")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
    temperature = read_float(src, "temperature", 0.0)
    if temperature < 0:
        raise InputError(f"temperature must be >= 0, got {temperature}")
    top_p = read_float(src, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p must be in (0, 1], got {top_p}")
    top_k = read_int(src, "top_k", 0)
    if top_k < 0:
        raise InputError(f"top_k must be >= 0 (0 is off), got {top_k}")
    try:
        sequences = stop_sequences.sequences()
    except ValueError as exc:
        raise InputError(str(exc)) from None
    grammar = read_str(src, GUIDED_GRAMMAR.name, "") or None
    if src.get(GUIDED_GRAMMAR.name) is not None and grammar is None:
        raise InputError(f"{GUIDED_GRAMMAR.name} must not be empty: leave it out for an unconstrained reply")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=read_optional_int(src, "seed"),
        ignore_eos=read_bool(src, "ignore_eos", False),
        stop_token_ids=read_int_list(src, "stop_token_ids"),
        stop_token_sequences=sequences,
        grammar=grammar,
        logprobs=_read_logprob_count(src, LOGPROBS.name),
        prompt_logprobs=_read_logprob_count(src, PROMPT_LOGPROBS.name),
    )


def _read_logprob_count(src: TensorSource, name: str) -> int | None:
    count = read_optional_int(src, name)
    if count is not None and not 0 <= count <= MAX_LOGPROBS:
        raise InputError(f"{name} must be in [0, {MAX_LOGPROBS}] alternatives per token, got {count}")
    return count


def read_cancel_target(src: TensorSource) -> str | None:
    """The request id a control request cancels, or None for an ordinary request."""
    if src.get(CANCEL_INPUT) is None:
        return None
    return read_str(src, CANCEL_INPUT)


def parse_engine_request(request_id: str, src: TensorSource, vocab_size: int | None = None) -> EngineRequest:
    """Read one `cpu_engine` generation request; InputError names what is wrong."""
    prompt = read_int_list(src, "input_ids")
    if not prompt:
        raise InputError("input_ids is required and must not be empty")
    resume = read_int_list(src, "resume_token_ids")
    if vocab_size is not None:
        for name, ids in (("input_ids", prompt), ("resume_token_ids", resume)):
            bad = [i for i in ids if not 0 <= i < vocab_size]
            if bad:
                raise InputError(f"{name} holds ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")
    stops = StopTokenSequences(read_int_list(src, "stop_token_sequences"), read_int_list(src, "stop_token_offsets"))
    return EngineRequest(
        request_id=request_id,
        prompt_token_ids=prompt,
        sampling=read_sampling(src, stops),
        request_class=read_request_class(src),
        resume_token_ids=resume,
        cache_namespace=read_str(src, "cache_namespace", ""),
        slo_ttft_ms=read_slo_ttft_ms(src),
    )


def engine_request_tensors(request: EngineRequest) -> Outputs:
    """The tensors that ask an engine model for `request` (what `llm` sends)."""
    sampling = request.sampling
    stops = StopTokenSequences.from_sequences(sampling.stop_token_sequences)
    tensors: Outputs = {
        "input_ids": int32_tensor(request.prompt_token_ids),
        "max_tokens": int32_scalar(sampling.max_tokens),
        "request_class": text_tensor(request.request_class.value),
        "temperature": fp32_scalar(sampling.temperature),
        "top_p": fp32_scalar(sampling.top_p),
        "top_k": int32_scalar(sampling.top_k),
        "ignore_eos": bool_scalar(sampling.ignore_eos),
        "cache_namespace": text_tensor(request.cache_namespace),
    }
    if sampling.seed is not None:
        tensors["seed"] = int64_scalar(sampling.seed)
    if request.resume_token_ids:
        tensors["resume_token_ids"] = int32_tensor(request.resume_token_ids)
    if sampling.stop_token_ids:
        tensors["stop_token_ids"] = int32_tensor(sampling.stop_token_ids)
    if stops.flat_ids:
        tensors["stop_token_sequences"] = int32_tensor(stops.flat_ids)
        tensors["stop_token_offsets"] = int32_tensor(stops.offsets)
    if sampling.grammar is not None:
        tensors[GUIDED_GRAMMAR.name] = text_tensor(sampling.grammar)
    if sampling.logprobs is not None:
        tensors[LOGPROBS.name] = int32_scalar(sampling.logprobs)
    if sampling.prompt_logprobs is not None:
        tensors[PROMPT_LOGPROBS.name] = int32_scalar(sampling.prompt_logprobs)
    if request.slo_ttft_ms is not None:
        tensors[SLO_TTFT_MS.name] = int32_scalar(request.slo_ttft_ms)
    return tensors


def cancel_request_tensors(target_request_id: str) -> Outputs:
    """The control request that cancels `target_request_id` in an engine model."""
    return {CANCEL_INPUT: text_tensor(target_request_id)}


def engine_output_tensors(output: RequestOutput) -> Outputs:
    """One `cpu_engine` response; log-probabilities only when the request asked for them."""
    tensors = {
        "output_token_ids": int32_tensor(output.new_token_ids),
        "finish_reason": text_tensor(output.finish_reason.value if output.finish_reason else ""),
        "prompt_tokens": int32_scalar(output.prompt_tokens),
        "cached_tokens": int32_scalar(output.cached_tokens),
        "completion_tokens": int32_scalar(output.completion_tokens),
    }
    if output.logprobs is not None:
        tensors.update(logprob_tensors(output.logprobs, OUTPUT_LOGPROB_TENSORS))
    if output.prompt_logprobs is not None:
        tensors.update(logprob_tensors(output.prompt_logprobs, PROMPT_LOGPROB_TENSORS))
    return tensors


def parse_engine_output(
    request_id: str, src: TensorSource, *, final: bool, sampling: SamplingParams | None = None
) -> RequestOutput:
    """Read one engine response back (the `llm` side). `final` is the response's FINAL flag;
    `sampling` the request's, which says how many alternatives its log-probabilities list."""
    reason_text = read_str(src, "finish_reason", "")
    try:
        reason = FinishReason(reason_text) if reason_text else None
    except ValueError:
        raise InputError(f"engine answered with an unknown finish_reason {reason_text!r}") from None
    return RequestOutput(
        request_id=request_id,
        new_token_ids=read_int_list(src, "output_token_ids"),
        finished=final or reason is not None,
        finish_reason=reason,
        prompt_tokens=read_int(src, "prompt_tokens", 0),
        cached_tokens=read_int(src, "cached_tokens", 0),
        completion_tokens=read_int(src, "completion_tokens", 0),
        logprobs=read_logprobs(src, OUTPUT_LOGPROB_TENSORS, sampling.logprobs or 0) if sampling else None,
        prompt_logprobs=read_logprobs(src, PROMPT_LOGPROB_TENSORS, sampling.prompt_logprobs or 0) if sampling else None,
    )
