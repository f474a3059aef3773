"""One door request through GenerationService: what it asks for, and its reply as `llm`'s
responses.

    DoorRequest ──▶ door_generation_input(): the body's GenerationInput (as HTTP's), with
                    TensorRT-LLM's guide as its grammar and `return_log_probs` as `logprobs`
                ──▶ request_digest(): what a repeat of its id must match
    InflightRequest ──▶ responses(): each delta as it comes, then the end (finish reason,
                        usage, `triton_final_response`); `stream` false, or ModelInfer:
                        whole_response(), the reply in one

Log-probabilities go out as TensorRT-LLM's outputs (trtllm_tensors.py): each response's own
tokens' in `output_log_probs`, the reply's running sum in `cum_log_probs`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from gateway.grpc_door.tensors import DoorRequest, infer_response
from gateway.grpc_door.trtllm_tensors import GUIDE, output_log_probs
from serving.generation import GenerationInput, body_digest, generation_input
from serving.idempotency import fingerprint
from serving.readers import reading
from serving.requests_registry import InflightRequest, RequestRegistry

DOOR = "grpc"  # the usage label of what comes through here


async def door_generation_input(parsed: DoorRequest, *, stream: bool) -> GenerationInput:
    """What the request asks GenerationService for: its body's, as HTTP's, with TensorRT-LLM's
    guide as the grammar (built in a worker thread: GBNF is converted in Python) whose problem
    names `guided_decoding_guide`, and `return_log_probs` as `logprobs` without alternatives."""
    inp = generation_input(parsed.body, door=DOOR, stream=stream)
    if parsed.guide is not None:
        grammar = await asyncio.to_thread(parsed.guide.grammar)
        inp = replace(inp, guided_grammar=grammar, grammar_param=GUIDE.name)
    return replace(inp, logprobs=0) if parsed.log_probs else inp


def request_digest(parsed: DoorRequest) -> str:
    """What a repeat of the request's id must match: HTTP's digest of the same body, and
    TensorRT-LLM's inputs when given (an id reused with another guide is ALREADY_EXISTS)."""
    digest = body_digest(parsed.body)
    if parsed.guide is None and not parsed.log_probs:
        return digest
    guide = None if parsed.guide is None else [parsed.guide.guide_type, parsed.guide.guide]
    return fingerprint({"body": digest, "guide": guide, "return_log_probs": parsed.log_probs})


def whole_response(
    parsed: DoorRequest,
    entry: InflightRequest,
    *,
    final: bool | None,
    text: str | None = None,
    token_ids: tuple[int, ...] | None = None,
) -> Any:
    """The reply so far in one response with its end: all of it, or (`text`/`token_ids` given)
    the end alone after the streamed deltas (with the reply's `cum_log_probs`)."""
    log_probs = None
    if parsed.log_probs:
        values: list[float] = []
        cumulative = 0.0
        for delta in entry.deltas:  # summed delta by delta, as `responses` sums them
            delta_values = output_log_probs(delta.token_ids, delta.logprobs)
            values += delta_values
            cumulative += math.fsum(delta_values)
        log_probs = (values if token_ids is None else [], cumulative)
    return infer_response(
        parsed.body.model,
        parsed.request_id or entry.public_id,
        parsed.outputs,
        text=entry.text if text is None else text,
        token_ids=[t for delta in entry.deltas for t in delta.token_ids] if token_ids is None else token_ids,
        finish_reason=entry.stop_reason or "aborted",
        usage=entry.usage,
        completion_tokens=entry.usage.completion_tokens,
        final=final,
        log_probs=log_probs,
    )


async def responses(parsed: DoorRequest, entry: InflightRequest, registry: RequestRegistry) -> AsyncIterator[Any]:
    """One generation's responses: its deltas as they come, then a final one with its
    finish reason and usage (`stream` false: one response with the whole reply)."""
    with reading(entry, registry):
        if not parsed.stream:
            await entry.wait_done()
            if entry.error is not None:
                raise entry.error
            yield whole_response(parsed, entry, final=True)
            return
        seen = completion = 0
        cumulative = 0.0  # the reply's log-probability so far (`cum_log_probs`)
        while True:
            while seen < len(entry.deltas):
                delta = entry.deltas[seen]
                seen += 1
                completion += len(delta.token_ids)
                log_probs = None
                if parsed.log_probs:
                    values = output_log_probs(delta.token_ids, delta.logprobs)
                    cumulative += math.fsum(values)
                    log_probs = (values, cumulative)
                yield infer_response(
                    parsed.body.model, parsed.request_id or entry.public_id, parsed.outputs,
                    text=delta.text, token_ids=delta.token_ids, finish_reason="", usage=entry.usage,
                    completion_tokens=completion, final=False, log_probs=log_probs,
                )  # fmt: skip
            if entry.done:
                break
            await entry.wait_changed(seen)
        if entry.error is not None:
            raise entry.error
        yield whole_response(parsed, entry, final=True, text="", token_ids=())
