"""A 405 says every method its path serves: `Allow` lists them all (RFC 9110), however many
routes serve the path, and the message names them too."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from gateway.allowed_methods import allowed_methods


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/files", "GET, POST"),  # two routes: Starlette's own Allow said only "POST"
        ("PUT", "/v1/files", "GET, POST"),
        ("DELETE", "/v1/batches", "GET, POST"),
        ("OPTIONS", "/v1/files/file-abc", "GET, DELETE"),  # it said only "GET"
        ("PATCH", "/v1/files/file-abc", "GET, DELETE"),
        ("GET", "/v1/generate/req-1", "DELETE"),
        ("POST", "/v1/models", "GET"),
        ("POST", "/healthz", "GET"),
    ],
)
async def test_a_405_allows_every_method_the_path_serves(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    reply = await client.request(method, path)
    assert reply.status_code == 405, reply.text
    assert reply.headers["allow"] == allow
    assert reply.json()["error"] == {
        "message": f"'{method}' is not served at this path; it serves {allow}",
        "type": "invalid_request_error",
        "param": None,
        "code": "method_not_allowed",
    }


async def test_an_unknown_path_is_still_a_404(client: httpx.AsyncClient) -> None:
    reply = await client.request("OPTIONS", "/v1/nothing-here")
    assert reply.status_code == 404
    assert "allow" not in reply.headers


def test_allowed_methods_sees_through_included_routers(app: FastAPI) -> None:
    assert allowed_methods(app.routes, {"path": "/v1/batches/batch_1/cancel"}) == ["POST"]
    assert allowed_methods(app.routes, {"path": "/openapi.json"}) == ["GET", "HEAD"]
    assert allowed_methods(app.routes, {"path": "/v1/nothing-here"}) == []
