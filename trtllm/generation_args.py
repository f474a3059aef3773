"""An `EngineRequest` (the `cpu_engine` contract) as the arguments of `LLM.generate_async`.

    prompt_token_ids + resume_token_ids ──▶ inputs (the resumed reply is context, not output)
    max_tokens - len(resume_token_ids)  ──▶ SamplingParams.max_tokens
    temperature 0                       ──▶ greedy: top_k 1 (TensorRT-LLM's greedy path)
    request_class                       ──▶ priority (0..1, default 0.5), where the release has it:
                                            priority 1.0, interactive 0.75, flex 0.25, bulk 0.0
    cache_namespace                     ──▶ cache_salt (blocks are reused only under one salt)

`llm` tokenizes and detokenizes, so the engine deals in ids only: `detokenize` is off and
`end_id` is always given (the checkpoint's, not looked up in the LLM's tokenizer, which is
loaded only for guided decoding). `generate_async` takes `priority` only from TensorRT-LLM 1.3
on (with the scheduler's `waiting_queue_policy: priority`); where the pinned release has none
(build_engines/trtllm_pin.py) the engine loop holds flex and bulk back itself
(`trtllm.engine_loop`), so `with_priority` is False there.

Stop token *sequences* are not passed down: the LLM API takes single stop token ids only, so
`trtllm.stop_sequences` matches sequences on the streamed tokens and the loop aborts the request.

Seeded sampling: TensorRT-LLM seeds one generator per request and draws from it in order, so a
reply resumed on another server with the same seed does not draw what the original would have
(the CPU engine keys every draw by (seed, token index)). Greedy replies resume exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.request import EngineRequest, RequestClass

# The executor's queue order when it must choose, highest first (its default is 0.5): the classes'
# order, spread over 0..1 with people's two classes above the default and flex and bulk below it.
# TensorRT-LLM orders its waiting queue by it and never preempts by it: the CPU engine's
# preemption by class (engine/request.py PREEMPTS) has no counterpart here.
PRIORITY_OF_CLASS: dict[RequestClass, float] = {
    RequestClass.PRIORITY: 1.0,
    RequestClass.INTERACTIVE: 0.75,
    RequestClass.FLEX: 0.25,
    RequestClass.BULK: 0.0,
}


@dataclass(frozen=True, slots=True)
class GenerationArgs:
    """What one `generate_async` call gets: inputs, `SamplingParams(**sampling)` and the rest."""

    inputs: list[int]
    sampling: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # keyword arguments beside sampling_params


def generation_args(request: EngineRequest, end_id: int, *, with_priority: bool) -> GenerationArgs:
    """Map one validated request (`engine.llm_engine.request_problem` found nothing wrong)."""
    params = request.sampling
    sampling: dict[str, Any] = {
        "end_id": end_id,
        "max_tokens": params.max_tokens - len(request.resume_token_ids),
        "ignore_eos": params.ignore_eos,
        "detokenize": False,  # `llm` detokenizes; the engine deals in token ids only
    }
    if params.temperature == 0:
        sampling["top_k"] = 1
    else:
        sampling["temperature"] = params.temperature
        if params.top_p < 1.0:
            sampling["top_p"] = params.top_p
        if params.top_k > 0:
            sampling["top_k"] = params.top_k
    if params.seed is not None:
        sampling["seed"] = params.seed
    if params.stop_token_ids:
        sampling["stop_token_ids"] = list(params.stop_token_ids)
    extra: dict[str, Any] = {}
    if with_priority:
        extra["priority"] = PRIORITY_OF_CLASS[request.request_class]
    if request.cache_namespace:
        extra["cache_salt"] = request.cache_namespace
    return GenerationArgs([*request.prompt_token_ids, *request.resume_token_ids], sampling, extra)
