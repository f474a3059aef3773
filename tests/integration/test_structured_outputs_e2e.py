"""Structured output, tool calls and log-probabilities end to end: the official `openai` SDK, a
real gateway process, the real Triton server of `triton_pool` (the tiny model, greedy): a
JSON-schema reply parses and validates, a required tool call comes back in OpenAI's shape
(streamed and whole alike), and log-probabilities are present and consistent with the reply."""

from __future__ import annotations

import json
import math
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}
TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string", "maxLength": 12}},
            "required": ["q"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
MESSAGES: Any = [{"role": "user", "content": "The quick brown fox"}]
GREEDY = 0.0  # these compare two reads of one reply: greedy (the OpenAI routes sample by default)


def _client(live_gateway: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=live_gateway.api_key, max_retries=0, timeout=60)


def test_a_json_schema_reply_validates_with_logprobs(live_gateway, triton_pool) -> None:  # type: ignore[no-untyped-def]
    client = _client(live_gateway)
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": True}}
    whole = client.chat.completions.create(
        model=triton_pool.model_id, messages=MESSAGES, max_tokens=60, response_format=response_format,
        logprobs=True, top_logprobs=3, temperature=GREEDY,
    )  # fmt: skip
    choice = whole.choices[0]
    assert choice.finish_reason == "stop"
    value = json.loads(choice.message.content or "")
    assert set(value) == {"id", "ok"} and 0 <= value["id"] <= 999 and isinstance(value["ok"], bool)
    content = choice.logprobs.content if choice.logprobs else None
    assert content is not None and len(content) == whole.usage.completion_tokens  # type: ignore[union-attr]
    assert b"".join(bytes(t.bytes or []) for t in content).decode() == choice.message.content
    for token in content:  # greedy: the chosen token is the most likely allowed one
        assert len(token.top_logprobs) == 3 and token.top_logprobs[0].token == token.token
        assert math.isclose(token.top_logprobs[0].logprob, token.logprob) and token.logprob <= 0
    # Streamed: the same reply, the same numbers.
    chunks = list(
        client.chat.completions.create(
            model=triton_pool.model_id, messages=MESSAGES, max_tokens=60, response_format=response_format,
            logprobs=True, top_logprobs=3, stream=True, temperature=GREEDY,
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or []]
    assert text == choice.message.content and len(streamed) == len(content)
    # The same up to float rounding (the second reads its prompt from the prefix cache).
    assert all(
        math.isclose(a.logprob, b.logprob, rel_tol=1e-4, abs_tol=1e-5) for a, b in zip(streamed, content, strict=True)
    )
    # A bad schema: the caller's 400 with llguidance's reason, before any server is asked.
    bad: Any = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "strin"}, "strict": True}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=triton_pool.model_id, messages=MESSAGES, max_tokens=5, response_format=bad)
    assert refused.value.param == "response_format" and "strin" in refused.value.message


def test_a_required_tool_call_comes_back_in_openais_shape(live_gateway, triton_pool) -> None:  # type: ignore[no-untyped-def]
    client = _client(live_gateway)
    whole = client.chat.completions.create(
        model=triton_pool.model_id, messages=MESSAGES, max_tokens=80, tools=[TOOL], tool_choice="required",
        temperature=GREEDY,
    )  # fmt: skip
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "lookup"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"q"} and isinstance(arguments["q"], str) and len(arguments["q"]) <= 12
    with client.chat.completions.stream(
        model=triton_pool.model_id, messages=MESSAGES, max_tokens=80, tools=[TOOL], tool_choice="required",
        temperature=GREEDY,
    ) as stream:  # fmt: skip
        final = stream.get_final_completion()
    (streamed,) = final.choices[0].message.tool_calls or []
    assert final.choices[0].finish_reason == "tool_calls"
    assert (streamed.function.name, streamed.function.arguments) == ("lookup", call.function.arguments)


def test_completions_echo_scores_the_prompt(live_gateway, triton_pool) -> None:  # type: ignore[no-untyped-def]
    client = _client(live_gateway)
    prompt = "The quick brown fox"
    completion = client.completions.create(
        model=triton_pool.model_id, prompt=prompt, max_tokens=4, logprobs=2, echo=True, extra_body={"ignore_eos": True}
    )
    choice = completion.choices[0]
    logprobs = choice.logprobs
    assert choice.text.startswith(prompt) and logprobs is not None
    usage = completion.usage
    assert usage is not None and len(logprobs.tokens or []) == usage.prompt_tokens + usage.completion_tokens
    values = logprobs.token_logprobs or []
    assert values[0] is None and all(v is not None and v <= 0 for v in values[1:])
    assert all(len(top) >= 2 for top in (logprobs.top_logprobs or [])[1:])  # k, and the chosen one


def _pattern_format(name: str) -> Any:
    """A schema whose pattern outgrows llguidance's lexer limits a few dozen characters in (the
    issue's); `name` keeps each use's grammar apart (a server refuses a grammar whose shared
    lexer has hit its limit once, before any token)."""
    pattern = {"type": "string", "pattern": "^(a|aa|[a-z]{1,50}){500}$"}
    schema = {"type": "object", "properties": {name: pattern}, "required": [name], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}}


def test_a_reply_its_grammar_gives_up_on_is_an_error_never_a_stop(live_gateway, triton_pool) -> None:  # type: ignore[no-untyped-def]
    """The engine's matcher gives up mid-reply: a whole reply is a 400 `grammar_failed` (it was
    `stop` with a cut string), a stream sends its text and then the error event; a schema that
    accepts no text (`{"$ref": "#"}`, before: `stop` with "") is a 400 before any token."""
    client = _client(live_gateway)
    ask: Any = {"model": triton_pool.model_id, "messages": MESSAGES, "max_tokens": 200, "temperature": 0}
    with pytest.raises(openai.BadRequestError) as whole:
        client.chat.completions.create(**ask, response_format=_pattern_format("whole"))
    assert whole.value.code == "grammar_failed" and "could not be completed" in whole.value.message
    text = ""
    with pytest.raises(openai.APIError) as streamed:
        for chunk in client.chat.completions.create(**ask, response_format=_pattern_format("streamed"), stream=True):
            assert not chunk.choices or chunk.choices[0].finish_reason is None
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
    assert text.startswith('{"streamed":"') and "grammar_failed" in str(streamed.value.body)
    itself: Any = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"$ref": "#"}, "strict": True}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ask, response_format=itself)
    assert refused.value.param == "response_format" and "accepts no text" in refused.value.message
