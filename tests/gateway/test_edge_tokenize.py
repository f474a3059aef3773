"""A prompt that cannot fit the context by its size is a 400 before it is tokenized, on every
route that takes one (chat: all its messages together)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from contracts.catalog import ServedModel


@pytest.fixture
def tokenized(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The length of every text the gateway tokenizes."""
    seen: list[int] = []
    encode = ServedModel.encode_prompt

    def spy(self: ServedModel, text: str) -> list[int]:
        seen.append(len(text))
        return encode(self, text)

    monkeypatch.setattr(ServedModel, "encode_prompt", spy)
    yield seen


def limit_of(app: FastAPI, model_id: str) -> int:
    model = app.state.services.catalog.get(model_id)
    assert isinstance(model, ServedModel)
    return model.max_prompt_bytes


@pytest.mark.parametrize("route", ["/v1/generate", "/v1/completions"])
async def test_a_prompt_too_long_in_bytes_is_refused_untokenized(
    app: FastAPI, client: httpx.AsyncClient, backend: Any, tokenized: list[int], route: str
) -> None:
    prompt = "the fox " * (limit_of(app, "small") // 8 + 1)
    response = await client.post(route, json={"model": "small", "prompt": prompt, "max_tokens": 4})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "prompt")
    assert f"prompt is {len(prompt)} bytes" in error["message"]
    assert tokenized == []
    assert backend.requests == []


async def test_chat_messages_too_long_together_are_refused_untokenized(
    chat_template: None, app: FastAPI, client: httpx.AsyncClient, backend: Any, tokenized: list[int]
) -> None:
    share = limit_of(app, "small") // 4
    messages = [{"role": role, "content": "x" * share} for role in ("user", "assistant", "user", "assistant", "user")]
    response = await client.post("/v1/chat/completions", json={"model": "small", "messages": messages})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded", response.json()
    assert tokenized == []
    assert backend.requests == []


async def test_a_prompt_within_the_size_is_tokenized_and_counted(
    app: FastAPI, client: httpx.AsyncClient, tokenized: list[int]
) -> None:
    prompt = "the fox " * (limit_of(app, "small") // 8)  # may fit by size; its tokens do not
    response = await client.post("/v1/generate", json={"model": "small", "prompt": prompt, "max_tokens": 4})
    assert response.status_code == 400
    assert "tokens) + max_tokens (4) exceeds" in response.json()["error"]["message"]
    assert tokenized == [len(prompt)]
