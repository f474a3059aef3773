"""Nothing on a request's path runs on FastAPI's thread pool: every route and dependency the
generate and OpenAI paths use is `async def` (a plain `def` one costs a hop to a worker thread
and back per request: ~10 % of a short request's CPU when the service getters were plain
functions)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import dependencies, routing

from serving.requests_registry import RequestRegistry


async def test_a_request_never_hops_to_the_thread_pool(
    client: httpx.AsyncClient, registry: RequestRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []

    async def recorded(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(kwargs.get("function", func), "__qualname__", repr(func)))
        return func(*args, **kwargs)

    monkeypatch.setattr(dependencies.utils, "run_in_threadpool", recorded)
    monkeypatch.setattr(routing, "run_in_threadpool", recorded)
    calls = [
        ("POST", "/v1/generate", {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3}),
        ("POST", "/v1/generate", {"model": "small", "prompt": "the quick", "max_tokens": 3, "stream": True}),
        ("POST", "/v1/completions", {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3}),
        # this test model has no chat template: a 400, after every dependency of the route ran
        ("POST", "/v1/chat/completions", {"model": "small", "messages": [{"role": "user", "content": "hi"}]}),
        ("GET", "/v1/models", None),
        ("GET", "/v1/usage", None),
    ]
    for method, path, body in calls:
        response = await client.request(method, path, json=body)
        assert response.status_code == (400 if "chat" in path else 200), (path, response.text[:300])
    await registry.settled()
    assert hops == []
