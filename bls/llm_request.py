"""The `llm` model's inputs (contracts/llm_tensors.py), read and validated once at the edge."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bls.engine_tensors import read_request_class, read_sampling, read_slo_ttft_ms
from bls.tensors import InputError, Outputs, TensorSource, read_bool, read_int_list, read_str, read_str_list
from bls.tokenizer import StopTokenSequences
from contracts.llm_tensors import (
    CACHE_NAMESPACE,
    GUIDED_GRAMMAR,
    IGNORE_EOS,
    INPUT_IDS,
    LOGPROBS,
    MAX_TOKENS,
    PROMPT_LOGPROBS,
    REQUEST_CLASS,
    RESUME_TOKEN_IDS,
    SEED,
    SLO_TTFT_MS,
    STOP,
    STREAM,
    TEMPERATURE,
    TEXT_INPUT,
    TOP_K,
    TOP_P,
)
from engine.request import EngineRequest, RequestClass, SamplingParams


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """One request to `llm`: a prompt in, text out. The prompt is text (`preprocessing`
    tokenizes it) or, from the gateway, its token ids (`prompt_token_ids`; `prompt` is then "")."""

    prompt: str
    sampling: SamplingParams  # without stop sequences: preprocessing makes those from `stops`
    stops: tuple[str, ...] = ()
    stream: bool = True
    request_class: RequestClass = RequestClass.INTERACTIVE
    resume_token_ids: tuple[int, ...] = ()
    cache_namespace: str = ""
    prompt_token_ids: tuple[int, ...] = ()
    slo_ttft_ms: int | None = None  # the caller's first-token target, ms from arrival

    def engine_request(self, request_id: str, input_ids: tuple[int, ...], stops: StopTokenSequences) -> EngineRequest:
        """The engine request for this reply, once preprocessing has tokenized it."""
        sampling = replace(self.sampling, stop_token_sequences=stops.sequences())
        if self.resume_token_ids:
            # The server that wrote them sent the prompt's log-probabilities with its first token.
            sampling = replace(sampling, prompt_logprobs=None)
        return EngineRequest(
            request_id=request_id,
            prompt_token_ids=input_ids,
            sampling=sampling,
            request_class=self.request_class,
            resume_token_ids=self.resume_token_ids,
            cache_namespace=self.cache_namespace,
            slo_ttft_ms=self.slo_ttft_ms,
        )


def parse_llm_request(src: TensorSource) -> LlmRequest:
    """Read one `llm` request; InputError names the input that is wrong.

    The sampling inputs, `request_class` and `slo_ttft_ms` are read by the helpers `cpu_engine` shares
    (bls/engine_tensors.py): the engine's inputs of those names are `llm`'s."""
    prompt, prompt_token_ids = _read_prompt(src)
    if src.get("stop_token_ids") is not None:
        raise InputError("llm takes stop strings in 'stop', not 'stop_token_ids'")
    return LlmRequest(
        prompt=prompt,
        prompt_token_ids=prompt_token_ids,
        sampling=read_sampling(src, StopTokenSequences((), ())),
        stops=tuple(s for s in read_str_list(src, STOP.name) if s),
        stream=read_bool(src, STREAM.name, True),
        request_class=read_request_class(src),
        resume_token_ids=read_int_list(src, RESUME_TOKEN_IDS.name),
        cache_namespace=read_str(src, CACHE_NAMESPACE.name, ""),
        slo_ttft_ms=read_slo_ttft_ms(src),
    )


def _read_prompt(src: TensorSource) -> tuple[str, tuple[int, ...]]:
    """The prompt as (text, ()) or ("", token ids): exactly one of the two inputs, not empty.
    The ids' range is checked where the vocabulary is known (`Preprocessor.run_tokenized`)."""
    has_text, has_ids = src.get(TEXT_INPUT.name) is not None, src.get(INPUT_IDS.name) is not None
    if has_text == has_ids:
        raise InputError(
            f"send the prompt in exactly one of {TEXT_INPUT.name!r} (text) and {INPUT_IDS.name!r} (its token ids), "
            f"got {'both' if has_text else 'neither'}"
        )
    if has_ids:
        prompt_token_ids = read_int_list(src, INPUT_IDS.name)
        if not prompt_token_ids:
            raise InputError(f"{INPUT_IDS.name} must not be empty")
        return "", prompt_token_ids
    prompt = read_str(src, TEXT_INPUT.name)
    if not prompt:
        raise InputError(f"{TEXT_INPUT.name} must not be empty")
    return prompt, ()


def llm_request_tensors(request: LlmRequest) -> Outputs:
    """The tensors a client sends to `llm` for `request` (tests and in-process callers)."""
    sampling = request.sampling
    prompt = (
        {INPUT_IDS.name: INPUT_IDS.array(request.prompt_token_ids)}
        if request.prompt_token_ids
        else {TEXT_INPUT.name: TEXT_INPUT.array([request.prompt])}
    )
    tensors: Outputs = {
        **prompt,
        MAX_TOKENS.name: MAX_TOKENS.array([sampling.max_tokens]),
        STREAM.name: STREAM.array([request.stream]),
        REQUEST_CLASS.name: REQUEST_CLASS.array([request.request_class.value]),
        TEMPERATURE.name: TEMPERATURE.array([sampling.temperature]),
        TOP_P.name: TOP_P.array([sampling.top_p]),
        TOP_K.name: TOP_K.array([sampling.top_k]),
        IGNORE_EOS.name: IGNORE_EOS.array([sampling.ignore_eos]),
        CACHE_NAMESPACE.name: CACHE_NAMESPACE.array([request.cache_namespace]),
    }
    if request.stops:
        tensors[STOP.name] = STOP.array(request.stops)
    if sampling.seed is not None:
        tensors[SEED.name] = SEED.array([sampling.seed])
    if request.resume_token_ids:
        tensors[RESUME_TOKEN_IDS.name] = RESUME_TOKEN_IDS.array(request.resume_token_ids)
    if sampling.grammar is not None:
        tensors[GUIDED_GRAMMAR.name] = GUIDED_GRAMMAR.array([sampling.grammar])
    if sampling.logprobs is not None:
        tensors[LOGPROBS.name] = LOGPROBS.array([sampling.logprobs])
    if sampling.prompt_logprobs is not None:
        tensors[PROMPT_LOGPROBS.name] = PROMPT_LOGPROBS.array([sampling.prompt_logprobs])
    if request.slo_ttft_ms is not None:
        tensors[SLO_TTFT_MS.name] = SLO_TTFT_MS.array([request.slo_ttft_ms])
    return tensors
