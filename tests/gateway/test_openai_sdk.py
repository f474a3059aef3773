"""The official `openai` SDK against the gateway under a real uvicorn (FakeBackend behind it):
completions and chat, whole and streamed, usage, headers, and errors as the SDK's types."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest
import uvicorn
from fastapi import FastAPI

from build_engines.tokenizer import LLAMA_CHAT_TEMPLATE
from contracts.generation import GenerationDelta
from server_host.ports import free_ports

MESSAGES: list[Any] = [{"role": "user", "content": "the quick fox"}]


@pytest.fixture
async def sdk(
    make_app: Callable[[Any], FastAPI], backend: Any, config_path: Path, team_key: str
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An SDK client with team alpha's key, for the gateway served by uvicorn on a free port."""
    template = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA_CHAT_TEMPLATE}
    (config_path.parent / "models" / "small" / "tokenizer_config.json").write_text(json.dumps(template))
    app = make_app(backend)
    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        base_url = f"http://127.0.0.1:{port}/v1"
        async with openai.AsyncOpenAI(base_url=base_url, api_key=team_key, max_retries=0, timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=5)


async def test_completion(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.completions.with_raw_response.create(
        model="small", prompt="the fox", max_tokens=9, extra_headers={"X-Request-Id": "sdk-1"}
    )
    assert raw.headers["x-request-id"] == "sdk-1"
    completion = raw.parse()
    assert completion.id == "cmpl-sdk-1"
    assert completion.choices[0].text == "Hello, world"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 4


async def test_streamed_completion_with_usage(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.completions.create(
        model="small", prompt="the fox", max_tokens=9, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hello, world"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


async def test_chat_completion_with_class_header(sdk: openai.AsyncOpenAI, backend: Any) -> None:
    reply = await sdk.chat.completions.create(
        model="small",
        messages=MESSAGES,
        max_completion_tokens=9,
        temperature=0.7,
        seed=3,
        stop=["\n\n"],
        extra_headers={"X-Switchyard-Class": "bulk"},
    )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "Hello, world"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    (sent,) = backend.requests
    assert (sent.request_class, sent.max_tokens, sent.temperature, sent.seed, sent.stop) == (
        "bulk",
        9,
        0.7,
        3,
        ("\n\n",),
    )
    assert sent.prompt == "<s>[INST] the quick fox [/INST]"


async def test_streamed_chat_with_usage(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="small", messages=MESSAGES, max_tokens=9, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello, world"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


async def test_models_list(sdk: openai.AsyncOpenAI) -> None:
    assert [model.id async for model in sdk.models.list()] == ["small", "large"]


async def test_bad_input_raises_bad_request_error(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.chat.completions.create(model="small", messages=MESSAGES, n=2)
    assert (raised.value.type, raised.value.param) == ("invalid_request_error", "n")
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.completions.create(model="small", prompt="hi", extra_body={"temprature": 0.5})
    assert "unrecognized field 'temprature'" in raised.value.message
    with pytest.raises(openai.BadRequestError):
        await sdk.chat.completions.create(model="small", messages=[{"role": "assistant", "content": "first"}])


async def test_unknown_model_raises_not_found_error(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.completions.create(model="nope", prompt="hi", max_tokens=3)
    assert raised.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="nope", messages=MESSAGES, stream=True)


async def test_a_failure_mid_stream_raises_api_error(sdk: openai.AsyncOpenAI, backend: Any) -> None:
    backend.deltas = [GenerationDelta(text="Hi", token_ids=(5,)), GenerationDelta(finish_reason="aborted")]
    stream = await sdk.chat.completions.create(model="small", messages=MESSAGES, max_tokens=9, stream=True)
    with pytest.raises(openai.APIError, match="aborted"):
        async for _ in stream:
            pass


async def test_closing_the_stream_cancels_the_request(sdk: openai.AsyncOpenAI, backend: Any) -> None:
    backend.hold_after = 2
    stream = await sdk.chat.completions.create(
        model="small", messages=MESSAGES, max_tokens=9, stream=True, extra_headers={"X-Request-Id": "walk-away"}
    )
    chunks = aiter(stream)
    assert (await anext(chunks)).choices[0].delta.role == "assistant"
    assert (await anext(chunks)).choices[0].delta.content == "Hello"
    await stream.close()
    for _ in range(200):
        if backend.cancel_calls:
            break
        await asyncio.sleep(0.01)
    assert backend.cancel_calls == ["alpha/walk-away"]


async def test_key_team_and_id_errors_raise_the_sdks_types(
    sdk: openai.AsyncOpenAI, backend: Any, make_key: Callable[[str], str]
) -> None:
    with pytest.raises(openai.AuthenticationError) as unknown:
        await sdk.with_options(api_key="sy-not-a-key").models.list()
    assert unknown.value.type == "authentication_error"
    beta = sdk.with_options(api_key=make_key("beta"))
    with pytest.raises(openai.PermissionDeniedError) as forbidden:
        await beta.completions.create(model="large", prompt="the fox", max_tokens=3)
    assert forbidden.value.param == "model"

    await sdk.completions.create(model="small", prompt="the fox", max_tokens=3, extra_headers={"X-Request-Id": "one"})
    with pytest.raises(openai.ConflictError):
        await sdk.completions.create(
            model="small", prompt="the fox", max_tokens=4, extra_headers={"X-Request-Id": "one"}
        )
    assert len(backend.requests) == 1


async def test_errors_carry_openais_codes(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.AuthenticationError) as unknown:
        await sdk.with_options(api_key="sy-not-a-key").models.list()
    assert (unknown.value.type, unknown.value.code) == ("authentication_error", "invalid_api_key")
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.completions.create(model="nope", prompt="hi", max_tokens=3)
    assert (missing.value.type, missing.value.code) == ("not_found_error", "model_not_found")
    with pytest.raises(openai.BadRequestError) as too_long:
        await sdk.completions.create(model="small", prompt="the fox", max_tokens=10_000)
    assert (too_long.value.type, too_long.value.code) == ("invalid_request_error", "context_length_exceeded")


async def test_models_carry_when_they_were_built(sdk: openai.AsyncOpenAI, config_path: Path) -> None:
    built = int((config_path.parent / "models" / "small" / "tokenizer.json").stat().st_mtime)
    assert [(model.id, model.created) async for model in sdk.models.list()][:1] == [("small", built)]
    assert (await sdk.models.retrieve("small")).created == built


async def test_batches_echo_their_window_and_refuse_an_unknown_cursor(sdk: openai.AsyncOpenAI) -> None:
    body = {"model": "small", "prompt": "hi", "max_tokens": 3}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": body}
    uploaded = await sdk.files.create(file=("in.jsonl", json.dumps(line).encode() + b"\n"), purpose="batch")
    batch = await sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")
    assert batch.completion_window == "24h"
    assert (await sdk.batches.retrieve(batch.id)).completion_window == "24h"
    assert [listed.id async for listed in sdk.batches.list()] == [batch.id]
    with pytest.raises(openai.BadRequestError) as unknown:
        await sdk.batches.list(after="batch_unknown")
    assert (unknown.value.param, unknown.value.code) == ("after", "invalid_cursor")


class Record(pydantic.BaseModel):
    id: int
    ok: bool


async def test_parse_returns_the_pydantic_object(sdk: openai.AsyncOpenAI, backend: Any) -> None:
    backend.deltas = [GenerationDelta(text='{"id":7,', token_ids=(5, 6)),
                      GenerationDelta(text='"ok":true}', token_ids=(7,), finish_reason="stop")]  # fmt: skip
    completion = await sdk.chat.completions.parse(
        model="small", messages=MESSAGES, max_tokens=20, response_format=Record
    )
    assert completion.choices[0].message.parsed == Record(id=7, ok=True)
    grammar = backend.requests[0].guided_grammar
    assert grammar is not None and grammar.startswith("start: %json") and '"ok"' in grammar


async def test_streamed_tool_calls_assemble_as_the_sdk_expects(
    sdk: openai.AsyncOpenAI, backend: Any, config_path: Path
) -> None:
    small = config_path.parent / "models" / "small" / "tokenizer_config.json"
    (config_path.parent / "models" / "large" / "tokenizer_config.json").write_text(small.read_text())  # room for tools
    pieces = ["<tool_call>", '{"name":"lookup","arguments":{"q"', ':"fox"}', "}</tool_call>"]
    backend.deltas = [
        GenerationDelta(text=p, token_ids=(5 + i,), finish_reason="stop" if i == len(pieces) - 1 else None)
        for i, p in enumerate(pieces)
    ]
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tool: Any = {"type": "function", "function": {"name": "lookup", "parameters": parameters}}
    async with sdk.chat.completions.stream(
        model="large",
        messages=MESSAGES,
        max_tokens=20,
        tools=[tool],
        tool_choice="required",  # type: ignore[list-item]
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"q": "fox"}
    assert call.id.startswith("call_")
