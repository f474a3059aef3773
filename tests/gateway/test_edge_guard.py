"""Order at the edge: the key from the headers before a byte of the body, then its size (by
Content-Length, and by counting a chunked body), then the body itself; health stays open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

MAX_BODY = 4096


@pytest.fixture
def config_path(config_path: Path) -> Path:
    """The test config with a small body limit (uploads keep bulk's much larger one)."""
    config_path.write_text(config_path.read_text() + f"gateway: {{max_body_bytes: {MAX_BODY}}}\n")
    return config_path


class CountedBody:
    """A request body sent in chunks, counting how many the server pulled."""

    def __init__(self, chunks: int, chunk: bytes = b"x" * 1024) -> None:
        self.chunks = chunks
        self.chunk = chunk
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.pulled += 1
            yield self.chunk


async def test_an_anonymous_multi_megabyte_body_is_refused_unread(anonymous: httpx.AsyncClient) -> None:
    body = CountedBody(5 * 1024)  # 5 MiB, chunked
    response = await anonymous.post("/v1/generate", content=body.__aiter__())
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.headers["www-authenticate"] == "Bearer"
    assert body.pulled == 0


@pytest.mark.parametrize("authorization", [None, "Bearer sy-not-a-key", "Basic abc"])
async def test_malformed_json_without_a_valid_key_is_401_not_400(
    anonymous: httpx.AsyncClient, authorization: str | None
) -> None:
    headers = {"Content-Type": "application/json"} | ({"Authorization": authorization} if authorization else {})
    response = await anonymous.post("/v1/chat/completions", content=b"{not json", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


async def test_a_declared_length_over_the_limit_is_413_unread(client: httpx.AsyncClient) -> None:
    body = CountedBody(8)
    headers = {"Content-Length": str(8 * 1024), "Content-Type": "application/json"}
    response = await client.post("/v1/generate", content=body.__aiter__(), headers=headers)
    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
    assert f"{MAX_BODY} bytes" in error["message"]
    assert body.pulled == 0


async def test_a_chunked_body_is_read_only_up_to_the_limit(client: httpx.AsyncClient) -> None:
    body = CountedBody(1024)  # 1 MiB without a Content-Length
    response = await client.post("/v1/generate", content=body.__aiter__(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert body.pulled == MAX_BODY // 1024 + 1  # the chunk that crossed the limit, no more


async def test_a_body_within_the_limit_is_served(client: httpx.AsyncClient, backend: Any) -> None:
    response = await client.post("/v1/generate", json={"model": "small", "prompt": "the fox", "max_tokens": 4})
    assert response.status_code == 200
    assert len(backend.requests) == 1


async def test_an_upload_may_be_larger_than_a_json_body(client: httpx.AsyncClient) -> None:
    line = b'{"custom_id": "a", "prompt": "the quick brown fox", "max_tokens": 2}\n'
    content = line * (4 * MAX_BODY // len(line))
    response = await client.post(
        "/v1/files", files={"file": ("in.jsonl", content, "application/jsonl")}, data={"purpose": "batch"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["bytes"] == len(content)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json"])
async def test_health_metrics_and_docs_stay_public(anonymous: httpx.AsyncClient, path: str) -> None:
    assert (await anonymous.get(path)).status_code == 200


async def test_every_v1_route_needs_a_key_even_an_unknown_one(anonymous: httpx.AsyncClient) -> None:
    for path in ("/v1/models", "/v1/usage", "/v1/no-such-route"):
        assert (await anonymous.get(path)).status_code == 401, path
