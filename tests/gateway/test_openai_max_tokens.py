"""One rule for a reply without max_tokens on the OpenAI routes (gateway/openai_serving.py,
`reply_max_tokens`): the route's default (completions 16, as OpenAI's; chat the rest of the
context, at most 2,048), lowered to what the model's context and the team's hard limits leave
after the prompt; what the caller sends is used as sent. The OpenAPI document says so."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from build_engines.tokenizer import LLAMA_CHAT_TEMPLATE
from contracts.openai_wire.schemas import CHAT_DEFAULT_MAX_TOKENS, COMPLETIONS_DEFAULT_MAX_TOKENS

from .conftest import SMALL_CONTEXT

MESSAGES = [{"role": "user", "content": "the quick fox"}]
RENDERED = "<s>[INST] the quick fox [/INST]"
INFLIGHT_LIMIT = 1_000  # team gamma's max_inflight_tokens
DAY_LIMIT = 700  # team delta's tokens_per_day
# Without a limit: a reply's share of the `large` model's 36,864-token context is capped.
ROUTES = [("/v1/completions", COMPLETIONS_DEFAULT_MAX_TOKENS), ("/v1/chat/completions", CHAT_DEFAULT_MAX_TOKENS)]


@pytest.fixture
def config_path(config_path: Path) -> Path:
    """Teams with hard limits, and the Llama 2 chat template on both models."""
    teams = f"teams:\n  gamma: {{max_inflight_tokens: {INFLIGHT_LIMIT}}}\n  delta: {{tokens_per_day: {DAY_LIMIT}}}\n"
    config_path.write_text(config_path.read_text().replace("teams:\n", teams))
    template = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA_CHAT_TEMPLATE}
    for model_id in ("small", "large"):
        (config_path.parent / "models" / model_id / "tokenizer_config.json").write_text(json.dumps(template))
    return config_path


def body(route: str, model: str, prompt: str = "the quick fox", **fields: Any) -> dict[str, Any]:
    if route == "/v1/completions":
        return {"model": model, "prompt": prompt, **fields}
    return {"model": model, "messages": [{"role": "user", "content": prompt}], **fields}


def rendered(route: str, prompt: str) -> str:
    return prompt if route == "/v1/completions" else f"<s>[INST] {prompt} [/INST]"


@pytest.mark.parametrize(("route", "default"), ROUTES)
@pytest.mark.parametrize("omitted", [{}, {"max_tokens": None}])
async def test_without_max_tokens_a_reply_gets_its_routes_default(
    client: httpx.AsyncClient, backend: Any, route: str, default: int, omitted: dict[str, Any]
) -> None:
    response = await client.post(route, json=body(route, "large", **omitted))
    assert response.status_code == 200, response.text
    assert [r.max_tokens for r in backend.requests] == [default]


@pytest.mark.parametrize(("route", "default"), ROUTES)
async def test_the_default_is_lowered_to_the_rest_of_the_context(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int], route: str, default: int
) -> None:
    # 9 tokens a sentence; the chat template adds 16: a prompt that leaves under 16 of the 64.
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * (6 if route == "/v1/completions" else 4))
    rest = SMALL_CONTEXT - count_tokens(rendered(route, prompt))
    assert 0 < rest < min(default, COMPLETIONS_DEFAULT_MAX_TOKENS)
    response = await client.post(route, json=body(route, "small", prompt))
    assert response.status_code == 200, response.text
    assert [r.max_tokens for r in backend.requests] == [rest]


@pytest.mark.parametrize(("team", "limit"), [("gamma", INFLIGHT_LIMIT), ("delta", DAY_LIMIT)])
async def test_the_chat_default_is_lowered_to_what_the_teams_limits_leave(
    app: FastAPI,
    make_key: Callable[[str], str],
    backend: Any,
    count_tokens: Callable[[str], int],
    team: str,
    limit: int,
) -> None:
    """Admission would refuse a lease of prompt + max_tokens over either limit with a 413 that
    says to lower max_tokens: a caller who sent none is never told that."""
    headers = {"Authorization": f"Bearer {make_key(team)}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", headers=headers) as c:
        response = await c.post("/v1/chat/completions", json=body("/v1/chat/completions", "large"))
        assert response.status_code == 200, response.text
        # The chat reply's lease (all of delta's day) is released after its response: wait for
        # that, or the next request finds the day's tokens still held (429, 1 run in 20).
        await app.state.services.registry.settled()
        completions = await c.post("/v1/completions", json=body("/v1/completions", "large"))
        assert completions.status_code == 200, completions.text
    assert [r.max_tokens for r in backend.requests] == [limit - count_tokens(RENDERED), COMPLETIONS_DEFAULT_MAX_TOKENS]


@pytest.mark.parametrize(("route", "default"), ROUTES)
async def test_max_tokens_the_caller_sends_is_used_as_sent(
    client: httpx.AsyncClient, backend: Any, route: str, default: int
) -> None:
    assert (await client.post(route, json=body(route, "large", max_tokens=default + 1))).status_code == 200
    too_long = await client.post(route, json=body(route, "small", max_tokens=SMALL_CONTEXT))
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    assert too_long.json()["error"]["param"] == "max_tokens"
    assert [r.max_tokens for r in backend.requests] == [default + 1]


@pytest.mark.parametrize("route", [route for route, _ in ROUTES])
async def test_a_prompt_that_fills_the_context_is_refused_for_the_prompt(
    client: httpx.AsyncClient, backend: Any, route: str
) -> None:
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 8)  # over the small model's 64
    response = await client.post(route, json=body(route, "small", prompt))
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
    assert "shorten the prompt" in response.json()["error"]["message"]
    assert backend.requests == []


async def test_the_openapi_document_states_the_rule(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    fields = {
        "CompletionRequest": ["max_tokens"],
        "ChatCompletionRequest": ["max_tokens", "max_completion_tokens"],
    }
    for schema, names in fields.items():
        default = f"{CHAT_DEFAULT_MAX_TOKENS if schema.startswith('Chat') else COMPLETIONS_DEFAULT_MAX_TOKENS:,}"
        for name in names:
            field = schemas[schema]["properties"][name]
            assert field.get("default") is None, (schema, name)  # absent: the rule, not a number
            assert f"Absent or null: {default}, lowered to what the model's context" in field["description"]
