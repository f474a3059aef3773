"""Structured output and log-probabilities through a real tritonserver (`llm` → `cpu_engine`), as
the gateway sends them (router/triton_backend.build_inputs) and reads them (router/llm_response.parse_response):
the reply parses as the schema says, failover resumes it token for token, a bad schema is a
refusal with llguidance's reason, and log-probabilities come only when asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
import tritonclient.grpc.aio as grpcclient

from contracts.generation import GenerationDelta, GenerationRequest, Logprobs
from contracts.guided_grammar import json_schema_grammar
from router.llm_response import parse_response
from router.triton_backend import build_inputs

if TYPE_CHECKING:  # conftest modules are not importable under --import-mode=importlib
    from conftest import TritonPool

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}


@dataclass
class Streamed:
    deltas: list[GenerationDelta] = field(default_factory=list)
    error: str | None = None

    @property
    def token_ids(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)


async def stream(pool: TritonPool, request: GenerationRequest) -> Streamed:
    async def one() -> AsyncIterator[dict[str, object]]:
        yield {"model_name": "llm", "inputs": build_inputs(request), "request_id": request.request_id}

    got = Streamed()
    client = grpcclient.InferenceServerClient(pool.grpc_url)
    try:
        async for result, error in client.stream_infer(one(), headers=pool.headers):
            if error is not None:
                got.error = str(error)
                break
            delta = parse_response(result.get_response())
            got.deltas.append(delta)
            if delta.finish_reason:
                break
    finally:
        await client.close()
    return got


def run(pool: TritonPool, request: GenerationRequest) -> Streamed:
    return asyncio.run(asyncio.wait_for(stream(pool, request), 60))


def ask(request_id: str, **fields: object) -> GenerationRequest:
    fields = {"max_tokens": 60, **fields}
    return GenerationRequest(request_id=request_id, model_id="tiny", prompt="a record:", **fields)  # type: ignore[arg-type]


def test_a_json_schema_reply_validates_and_resumes_token_for_token(triton_pool: TritonPool) -> None:
    grammar = json_schema_grammar(SCHEMA)
    whole = run(triton_pool, ask("g1", guided_grammar=grammar, logprobs=3))
    assert whole.error is None and whole.deltas[-1].finish_reason == "stop"
    value = json.loads(whole.text)
    assert set(value) == {"id", "ok"} and 0 <= value["id"] <= 999 and isinstance(value["ok"], bool)
    # Streamed log-probabilities: one per token, 3 alternatives each, the greedy pick the first.
    runs = [d.logprobs for d in whole.deltas if d.logprobs is not None]
    values = [v for r in runs for v in r.token_logprobs]
    assert len(values) == len(whole.token_ids) and all(r.num_top == 3 for r in runs if r.token_logprobs)
    firsts = [r.top(i)[0][0] for r in runs for i in range(len(r.token_logprobs))]
    assert firsts == whole.token_ids and all(v <= 0 for v in values)
    # Failover: another server given the first k tokens continues the same grammar.
    k = len(whole.token_ids) // 2
    resumed = run(triton_pool, ask("g2", guided_grammar=grammar, resume_token_ids=tuple(whole.token_ids[:k])))
    assert resumed.error is None and whole.token_ids[:k] + resumed.token_ids == whole.token_ids


def test_a_bad_schema_is_the_callers_error_with_llguidances_reason(triton_pool: TritonPool) -> None:
    refused = run(triton_pool, ask("bad", guided_grammar=json_schema_grammar({"type": "strin"})))
    assert refused.error is not None
    assert "the grammar does not compile" in refused.error and "Invalid type: strin" in refused.error
    assert "invalid input: " in refused.error  # refused_input's prefix: the gateway's 400, never retried


def test_logprobs_only_when_asked_and_the_prompts_with_echo(triton_pool: TritonPool) -> None:
    plain = run(triton_pool, ask("p1", max_tokens=5))
    assert plain.error is None and all(d.logprobs is None and d.prompt_logprobs is None for d in plain.deltas)
    echo = run(triton_pool, ask("p2", max_tokens=5, logprobs=0, prompt_logprobs=2))
    prompts = [d.prompt_logprobs for d in echo.deltas if d.prompt_logprobs is not None]
    assert len(prompts) == 1 and isinstance(prompts[0], Logprobs) and prompts[0].num_top == 2
    assert len(prompts[0].token_logprobs) == (echo.deltas[-1].usage.prompt_tokens - 1)  # type: ignore[union-attr]
