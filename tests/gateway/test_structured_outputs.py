"""Structured output, tool calls and log-probabilities through the app (FakeBackend behind it):
what the engine is asked for (the grammar, k), a bad schema refused at the edge with llguidance's
reason (a schema that accepts no text too), a reply its grammar gave up on answered as an error
on every route (never a `stop`), and the replies in OpenAI's shapes, whole and streamed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from build_engines.tokenizer import LLAMA_CHAT_TEMPLATE
from contracts.generation import GenerationDelta, Logprobs
from contracts.guided_grammar import json_object_grammar, json_schema_grammar
from contracts.openai_wire.tool_calls import ToolSpec, call_text, tool_call_grammar

Sse = Callable[[str], list[tuple[str | None, Any]]]

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CHAT: dict[str, Any] = {"model": "large", "messages": [{"role": "user", "content": "the quick fox"}], "max_tokens": 9}


@pytest.fixture(autouse=True)
def chat_template(config_path: Path) -> None:
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA_CHAT_TEMPLATE}
    (config_path.parent / "models" / "large" / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture
def tokenizer(tokenizer_json: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_json))


def reply_as(backend: Any, tokenizer: Tokenizer, pieces: list[str], finish: str = "stop", k: int | None = None) -> None:
    """The backend answers with `pieces` (one delta each, its tokens the tokenizer's), with
    log-probabilities of k alternatives when `k` is set: token i's is -0.5 i, its alternatives
    itself then ids 1, 2, ..."""
    deltas = []
    position = 0
    for index, piece in enumerate(pieces):
        ids = tuple(tokenizer.encode(piece, add_special_tokens=False).ids)
        logprobs = None
        if k is not None:
            values = tuple(-0.5 * (position + i) for i in range(len(ids)))
            top_ids = tuple(t for token in ids for t in (token, *range(1, k))[:k])
            top_values = tuple(v for value in values for v in (value, *(value - j for j in range(1, k)))[:k])
            logprobs = Logprobs(values, top_ids, top_values)
        position += len(ids)
        last = index == len(pieces) - 1
        deltas.append(GenerationDelta(piece, ids, finish if last else None, logprobs=logprobs))
    backend.deltas = deltas


async def test_a_json_schema_is_sent_as_its_grammar_strict_or_lenient(client: httpx.AsyncClient, backend: Any) -> None:
    for strict, lenient in ((True, False), (None, True)):
        spec = {"name": "record", "schema": SCHEMA, **({"strict": strict} if strict is not None else {})}
        body = {**CHAT, "response_format": {"type": "json_schema", "json_schema": spec}}
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        assert backend.requests[-1].guided_grammar == json_schema_grammar(SCHEMA, lenient=lenient)
    body = {"model": "large", "prompt": "the fox", "response_format": {"type": "json_object"}}
    assert (await client.post("/v1/completions", json=body)).status_code == 200
    assert backend.requests[-1].guided_grammar == json_object_grammar()
    generate = {"model": "large", "prompt": "the fox", "max_tokens": 3, "response_format": {"type": "json_object"}}
    assert (await client.post("/v1/generate", json=generate)).status_code == 200
    assert backend.requests[-1].guided_grammar == json_object_grammar()
    text = {**CHAT, "response_format": {"type": "text"}}
    assert (await client.post("/v1/chat/completions", json=text)).status_code == 200
    assert backend.requests[-1].guided_grammar is None and backend.requests[-1].logprobs is None


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/generate"])
async def test_a_bad_schema_is_a_400_with_llguidances_reason(
    client: httpx.AsyncClient, backend: Any, path: str
) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "strin"}, "strict": True}}
    body = CHAT if path.endswith("chat/completions") else {"model": "large", "prompt": "the fox", "max_tokens": 3}
    for _ in range(2):  # the second answered from the cache
        response = await client.post(path, json={**body, "response_format": bad})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "response_format"
        assert "the grammar does not compile" in error["message"] and "strin" in error["message"]
    assert backend.requests == []


async def test_a_schema_that_accepts_no_text_is_a_400_before_any_server(
    client: httpx.AsyncClient, backend: Any
) -> None:
    """`{"$ref": "#"}` compiles, and a server used to end its reply at once, `stop` with ""."""
    itself = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"$ref": "#"}, "strict": True}}
    response = await client.post("/v1/chat/completions", json={**CHAT, "response_format": itself})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "response_format" and "the grammar accepts no text" in error["message"]
    assert backend.requests == []


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/generate"])
async def test_a_reply_its_grammar_gave_up_on_is_an_error_never_a_stop(
    client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer, sse: Sse, path: str
) -> None:
    """The engine's `grammar_failed` (llguidance hit a limit mid-reply): a whole reply is a 400
    `grammar_failed`; a stream has sent its text, and ends with the error event instead of a
    finish reason."""
    pieces = ['{"x":"', "abcab"]
    reply_as(backend, tokenizer, pieces, finish="grammar_failed")
    tokens = sum(len(tokenizer.encode(piece, add_special_tokens=False).ids) for piece in pieces)
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": True}}
    body = CHAT if path.endswith("chat/completions") else {"model": "large", "prompt": "the fox", "max_tokens": 9}
    body = {**body, "response_format": fmt}
    whole = await client.post(path, json=body)
    assert whole.status_code == 400, whole.text
    error = whole.json()["error"]
    assert (error["code"], error["type"], error["param"]) == ("grammar_failed", "invalid_request_error", None)
    assert "could not be completed under its grammar" in error["message"]
    assert f"after {tokens} tokens" in error["message"]
    events = sse((await client.post(path, json={**body, "stream": True})).text)
    assert events[-1][0] == "error" and events[-1][1]["error"] == error
    data = [event for name, event in events if name is None and event != "[DONE]"]
    assert data and all(choice.get("finish_reason") is None for d in data for choice in d.get("choices", []))
    assert all("stop_reason" not in d for d in data)


async def test_required_tools_constrain_the_reply_to_a_call_in_openais_shape(
    client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer
) -> None:
    reply_as(backend, tokenizer, ["<tool_call>", '{"name":"get_weather","arguments":{"city":', '"Paris"}}</tool_call>'])
    body = {**CHAT, "tools": [WEATHER], "tool_choice": "required"}
    response = await client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "tools-1"})
    assert response.status_code == 200, response.text
    assert backend.requests[0].guided_grammar == tool_call_grammar([ToolSpec.model_validate(WEATHER)], "required")
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    # The model was told of the tool, in the fallback form (the Llama 2 template knows none).
    assert "<tool_call>" in backend.requests[0].prompt and "get_weather" in backend.requests[0].prompt


async def test_a_streamed_call_comes_as_its_name_then_argument_pieces(
    client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer, sse: Sse
) -> None:
    pieces = ["<tool_", "call>", '{"name":"get_weather","arguments":{"ci', 'ty":"Par', 'is"}}</tool_', "call>"]
    reply_as(backend, tokenizer, pieces)
    body = {**CHAT, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    response = await client.post("/v1/chat/completions", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    chunks = [data for _, data in sse(response.text)[:-1]]
    calls = [call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0] == {"index": 0, "id": calls[0]["id"], "type": "function",
                        "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    assert all(set(call) == {"index", "function"} and set(call["function"]) == {"arguments"} for call in calls[1:])
    assert "".join(call["function"]["arguments"] for call in calls) == '{"city":"Paris"}'
    assert len(calls) > 2  # streamed in pieces, not at the end
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(not c["choices"][0]["delta"].get("content") for c in chunks)


async def test_auto_lets_text_through_as_content(
    client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer, sse: Sse
) -> None:
    reply_as(backend, tokenizer, ["<", "the fox", " jumps"])
    body = {**CHAT, "tools": [WEATHER]}
    response = await client.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [data for _, data in sse(response.text)[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "<the fox jumps"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "TEXT" in backend.requests[0].guided_grammar  # auto: text or a call
    whole = (await client.post("/v1/chat/completions", json=body)).json()["choices"][0]
    assert whole["message"] == {"role": "assistant", "content": "<the fox jumps"} and whole["finish_reason"] == "stop"


async def test_tools_and_a_response_format_are_not_combined(client: httpx.AsyncClient, backend: Any) -> None:
    body = {**CHAT, "tools": [WEATHER], "response_format": {"type": "json_object"}}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "response_format"
    none = {**body, "tool_choice": "none"}
    assert (await client.post("/v1/chat/completions", json=none)).status_code == 200
    assert backend.requests[-1].guided_grammar == json_object_grammar()


async def test_tool_history_renders_through_the_template(client: httpx.AsyncClient, backend: Any) -> None:
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "warm"},
    ]  # fmt: skip
    response = await client.post("/v1/chat/completions", json={**CHAT, "messages": messages, "tools": [WEATHER]})
    assert response.status_code == 200, response.text
    prompt = backend.requests[0].prompt
    assert call_text("get_weather", '{"city": "Paris"}') in prompt
    assert '<tool_response>{"tool_call_id":"call_1","content":"sunny"}</tool_response>\n' in prompt
    assert '"call_2","content":"warm"}</tool_response> [/INST]' in prompt  # the tool results are the user's turn
    assert prompt.startswith("<s>[INST] <<SYS>>\nYou can call these functions.")


async def test_chat_logprobs_whole_and_streamed(
    client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer, sse: Sse
) -> None:
    reply_as(backend, tokenizer, ["the quick", " fox"], k=2)
    body = {**CHAT, "logprobs": True, "top_logprobs": 2}
    whole = (await client.post("/v1/chat/completions", json=body)).json()
    assert backend.requests[0].logprobs == 2 and backend.requests[0].prompt_logprobs is None
    content = whole["choices"][0]["logprobs"]["content"]
    ids = [t for d in backend.deltas for t in d.token_ids]
    assert [c["token"] for c in content] == [tokenizer.decode([t]) for t in ids]
    assert "".join(bytes(c["bytes"]).decode() for c in content) == "thequickfox"  # the test vocab has no spaces
    assert [c["logprob"] for c in content] == [-0.5 * i for i in range(len(ids))]
    assert all(len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["token"] == c["token"] for c in content)
    streamed = [
        data for _, data in sse((await client.post("/v1/chat/completions", json={**body, "stream": True})).text)[:-1]
    ]
    pieces = [c["choices"][0]["logprobs"]["content"] for c in streamed if c["choices"] and c["choices"][0]["logprobs"]]
    assert [entry for piece in pieces for entry in piece] == content
    plain = (await client.post("/v1/chat/completions", json=CHAT)).json()
    assert plain["choices"][0]["logprobs"] is None and backend.requests[-1].logprobs is None


async def test_completions_logprobs_and_echo(client: httpx.AsyncClient, backend: Any, tokenizer: Tokenizer) -> None:
    reply_as(backend, tokenizer, ["quick", "fox"], k=1)
    prompt_ids = tokenizer.encode("the lazy dog").ids
    backend.deltas[0] = GenerationDelta(
        backend.deltas[0].text, backend.deltas[0].token_ids, logprobs=backend.deltas[0].logprobs,
        prompt_logprobs=Logprobs(tuple(-1.0 - i for i in range(len(prompt_ids) - 1)),
                                 tuple(prompt_ids[1:]), tuple(-1.0 - i for i in range(len(prompt_ids) - 1))),
    )  # fmt: skip
    body = {"model": "large", "prompt": "the lazy dog", "max_tokens": 5, "logprobs": 1, "echo": True}
    response = await client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    assert (backend.requests[0].logprobs, backend.requests[0].prompt_logprobs) == (1, 1)
    (choice,) = response.json()["choices"]
    assert choice["text"] == "the lazy dogquickfox"
    logprobs = choice["logprobs"]
    reply_ids = [t for d in backend.deltas for t in d.token_ids]
    assert logprobs["tokens"] == [tokenizer.decode([t]) for t in prompt_ids + reply_ids]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert logprobs["token_logprobs"][1 : len(prompt_ids)] == [-1.0 - i for i in range(len(prompt_ids) - 1)]
    assert logprobs["token_logprobs"][len(prompt_ids) :] == [-0.5 * i for i in range(len(reply_ids))]
    # offsets into the text the tokens spell (this test vocab's tokens carry no spaces)
    spelled = "".join(logprobs["tokens"])
    assert [spelled[o : o + len(t)] for o, t in zip(logprobs["text_offset"], logprobs["tokens"], strict=True)] == (
        logprobs["tokens"]
    )
    top = logprobs["top_logprobs"][len(prompt_ids)]
    assert top == {logprobs["tokens"][len(prompt_ids)]: 0.0}  # the chosen one among them
    alone = {**body, "echo": False, "logprobs": 0}
    reply = (await client.post("/v1/completions", json=alone)).json()["choices"][0]
    assert reply["text"] == "quickfox" and reply["logprobs"]["text_offset"][0] == 0
    assert backend.requests[-1].prompt_logprobs is None
