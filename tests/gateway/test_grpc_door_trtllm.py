"""TensorRT-LLM's names and Triton's readiness answers at the door, on the real app (real Redis,
the FakeBackend) through unmodified `tritonclient.grpc.aio`: a guide reaches the server as the
grammar HTTP's `response_format` would, a grammar that does not compile is INVALID_ARGUMENT
before any server is asked, `return_log_probs` gives each response its tokens' log-probabilities
and the reply's sum, and an unknown model is `ready: false` as Triton answers it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from contracts.generation import GenerationDelta, Logprobs
from contracts.guided_grammar import json_schema_grammar
from tests.auth_headers import bearer

from . import test_grpc_door as door_app
from .conftest import FakeBackend
from .test_grpc_door import llm_inputs, stream

# The door's fixtures: the app serving it on a free port, a tritonclient.grpc.aio client of it.
capacity, settings, door_url, triton = door_app.capacity, door_app.settings, door_app.door_url, door_app.triton

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
LOG_PROBS = ((-0.5, -1.0), (-0.25,), (-2.0,))  # of the FakeBackend's deltas' tokens (5, 6), (7,), (8,)


def guided(guide_type: str, guide: str) -> dict[str, tuple[list[Any], str]]:
    return {"guided_decoding_guide_type": ([guide_type], "BYTES"), "guided_decoding_guide": ([guide], "BYTES")}


def with_log_probs(backend: FakeBackend) -> None:
    backend.deltas = [
        GenerationDelta(d.text, d.token_ids, d.finish_reason, logprobs=Logprobs(token_logprobs=values))
        for d, values in zip(backend.deltas, LOG_PROBS, strict=True)
    ]


async def test_a_guide_reaches_the_server_as_https_grammar(
    triton: triton_aio.InferenceServerClient,
    team_key: str,
    backend: FakeBackend,
) -> None:
    inputs = llm_inputs(**guided("json_schema", json.dumps(SCHEMA)))
    result = await triton.infer("small", inputs, headers=bearer(team_key))
    assert result.as_numpy("finish_reason")[0].decode() == "length"
    (sent,) = backend.requests
    assert sent.guided_grammar == json_schema_grammar(SCHEMA) and sent.logprobs is None


@pytest.mark.parametrize(
    ("guide_type", "guide", "reason"),
    [
        ("json_schema", json.dumps({"type": "strin"}), "strin"),  # llguidance's reason, as HTTP's 400 has it
        ("regex", "(unclosed", "unclosed"),
        ("ebnf_grammar", "start: missing_rule", "missing_rule"),
    ],
)
async def test_a_guide_that_does_not_compile_is_invalid_argument_before_any_server(
    triton: triton_aio.InferenceServerClient, team_key: str, backend: FakeBackend, guide_type: str, guide: str,
    reason: str,
) -> None:  # fmt: skip
    with pytest.raises(InferenceServerException) as refused:
        await triton.infer("small", llm_inputs(**guided(guide_type, guide)), headers=bearer(team_key))
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "guided_decoding_guide" in str(refused.value) and reason in str(refused.value)
    assert backend.requests == []


async def test_return_log_probs_on_a_stream_and_whole(
    triton: triton_aio.InferenceServerClient,
    team_key: str,
    backend: FakeBackend,
) -> None:
    with_log_probs(backend)
    inputs = llm_inputs(return_log_probs=([True], "BOOL"))
    got = await stream(triton, [{"model_name": "small", "inputs": inputs, "request_id": "lp-1"}], bearer(team_key))
    assert all(error is None for _, error in got)
    per_response = [result.as_numpy("output_log_probs").tolist() for result, _ in got]
    assert per_response == [[[-0.5, -1.0]], [[-0.25]], [[-2.0]], [[]]]  # the final one carries no token
    assert [result.as_numpy("cum_log_probs").tolist() for result, _ in got] == [[-1.5], [-1.75], [-3.75], [-3.75]]
    assert backend.requests[0].logprobs == 0  # each token's, no alternatives
    whole = await triton.infer("small", llm_inputs(return_log_probs=([True], "BOOL")), headers=bearer(team_key))
    assert whole.as_numpy("output_log_probs").tolist() == [[-0.5, -1.0, -0.25, -2.0]]
    assert math.isclose(float(whole.as_numpy("cum_log_probs")[0]), -3.75)
    plain = await triton.infer("small", llm_inputs(), headers=bearer(team_key))
    assert plain.as_numpy("output_log_probs") is None and plain.as_numpy("cum_log_probs") is None


async def test_an_id_reused_with_another_guide_is_already_exists(
    triton: triton_aio.InferenceServerClient,
    team_key: str,
    backend: FakeBackend,
) -> None:
    await triton.infer("small", llm_inputs(**guided("regex", "[a-z]+")), request_id="g-1", headers=bearer(team_key))
    again = await triton.infer(
        "small", llm_inputs(**guided("regex", "[a-z]+")), request_id="g-1", headers=bearer(team_key)
    )
    assert again.as_numpy("text_output")[0] == b"Hello, world" and len(backend.requests) == 1
    with pytest.raises(InferenceServerException) as conflict:
        await triton.infer("small", llm_inputs(**guided("regex", "[0-9]+")), request_id="g-1", headers=bearer(team_key))
    assert conflict.value.status() == "StatusCode.ALREADY_EXISTS"


async def test_a_model_or_version_not_served_is_not_ready_as_triton_answers(
    triton: triton_aio.InferenceServerClient,
    team_key: str,
    backend: FakeBackend,
) -> None:
    """Triton answers ModelReady for a model it lacks with `ready: false` and the other model
    RPCs with NOT_FOUND (checked against a real tritonserver 2.x)."""
    key = bearer(team_key)
    assert await triton.is_model_ready("small", headers=key) is True
    assert await triton.is_model_ready("small", "1", headers=key) is True
    assert await triton.is_model_ready("nope", headers=key) is False
    assert await triton.is_model_ready("small", "7", headers=key) is False
    for call in (
        triton.get_model_metadata("nope", headers=key),
        triton.get_model_config("nope", headers=key),
        triton.get_model_metadata("small", "7", headers=key),
        triton.get_model_config("small", "7", headers=key),
        triton.infer("small", llm_inputs(), model_version="7", headers=key),
    ):
        with pytest.raises(InferenceServerException) as refused:
            await call
        assert refused.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as no_key:  # a probe still needs a key
        await triton.is_model_ready("nope")
    assert no_key.value.status() == "StatusCode.UNAUTHENTICATED"
    assert backend.requests == []
