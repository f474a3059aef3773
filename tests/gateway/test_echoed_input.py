"""An error quotes at most a short prefix of what the caller sent (contracts/caller_echo.py):
a 3 MB model name, a long id, a long unknown field name or header comes back as 64 characters,
"…" and the value's length, never whole; and each is the 4xx it always was, never a 500."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from contracts.caller_echo import ECHO_CHARS
from tests.gateway.conftest import FakeBackend

HUGE = "m" * 3_000_000  # 3 MB: within the 4 MiB body limit, so the route itself answers
LONG = "i" * 5_000  # for a path, a query or a header
FORM = "f" * 60_000  # a form field (the multipart reader takes at most 64 KB of one)
# The longest message any of these may be: its own words, and 64 characters of the value.
MAX_MESSAGE = 400


def assert_echoed(reply: httpx.Response, status: int, value: str, param: str | None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text[:500]
    error: dict[str, Any] = reply.json()["error"]
    assert len(error["message"]) < MAX_MESSAGE, error["message"][:500]
    assert value[:ECHO_CHARS] + "…" in error["message"]
    assert f"({len(value):,} characters)" in error["message"]
    assert error["param"] == param
    assert len(reply.content) < 2 * MAX_MESSAGE
    return error


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/generate", {"model": HUGE, "prompt": "hi", "max_tokens": 2}),
        ("/v1/completions", {"model": HUGE, "prompt": "hi", "max_tokens": 2}),
        ("/v1/chat/completions", {"model": HUGE, "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
async def test_a_huge_model_name_is_echoed_as_a_prefix(
    client: httpx.AsyncClient, backend: FakeBackend, path: str, body: dict[str, Any]
) -> None:
    error = assert_echoed(await client.post(path, json=body), 404, HUGE, "model")
    assert error["code"] == "model_not_found"
    assert "use one of: small, large" in error["message"]
    assert backend.requests == []


async def test_a_huge_unknown_field_is_echoed_as_a_prefix_and_so_is_its_param(client: httpx.AsyncClient) -> None:
    body = {"model": "small", "prompt": "hi", "max_tokens": 2, HUGE: 1}
    reply = await client.post("/v1/generate", content=json.dumps(body), headers={"Content-Type": "application/json"})
    error = assert_echoed(reply, 400, HUGE, "'" + HUGE[:ECHO_CHARS] + f"…' ({len(HUGE):,} characters)")
    assert error["code"] == "unknown_parameter"


async def test_a_huge_value_is_echoed_as_a_prefix(client: httpx.AsyncClient) -> None:
    body = {"model": "small", "prompt": "hi", "max_tokens": HUGE}
    reply = await client.post("/v1/generate", json=body)
    assert_echoed(reply, 400, HUGE, "max_tokens")


@pytest.mark.parametrize(
    ("path", "param"),
    [
        (f"/v1/batches/{LONG}", "batch_id"),
        (f"/v1/files/{LONG}", "file_id"),
        (f"/v1/files/file-{LONG}", "file_id"),
    ],
)
async def test_a_long_id_in_the_path_is_echoed_as_a_prefix(client: httpx.AsyncClient, path: str, param: str) -> None:
    value = path.rsplit("/", 1)[1]
    assert_echoed(await client.get(path), 404, value, param)


async def test_a_long_cursor_is_echoed_as_a_prefix(client: httpx.AsyncClient) -> None:
    error = assert_echoed(await client.get("/v1/batches", params={"after": LONG}), 400, LONG, "after")
    assert error["code"] == "invalid_cursor"


async def test_a_huge_input_file_id_is_echoed_as_a_prefix(client: httpx.AsyncClient) -> None:
    body = {"input_file_id": HUGE, "endpoint": "/v1/completions", "completion_window": "24h"}
    assert_echoed(await client.post("/v1/batches", json=body), 404, HUGE, "input_file_id")


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"model": FORM}, 404, "model"),
        ({"model": "small", "deadline": FORM}, 400, "deadline"),
    ],
)
async def test_huge_batch_form_fields_are_echoed_as_a_prefix(
    client: httpx.AsyncClient, fields: dict[str, str], status: int, param: str
) -> None:
    line = json.dumps({"prompt": "hi", "max_tokens": 2}).encode() + b"\n"
    reply = await client.post("/v1/batches", data=fields, files={"file": ("in.jsonl", line, "application/jsonl")})
    assert_echoed(reply, status, FORM, param)


async def test_a_huge_purpose_is_echoed_as_a_prefix(client: httpx.AsyncClient) -> None:
    reply = await client.post("/v1/files", data={"purpose": FORM}, files={"file": ("in.jsonl", b"{}\n")})
    assert_echoed(reply, 400, FORM, "purpose")


@pytest.mark.parametrize(
    ("header", "param"), [("X-Request-Id", "X-Request-Id"), ("X-Switchyard-Class", "X-Switchyard-Class")]
)
async def test_a_long_header_is_echoed_as_a_prefix(client: httpx.AsyncClient, header: str, param: str) -> None:
    body = {"model": "small", "prompt": "hi", "max_tokens": 2}
    assert_echoed(await client.post("/v1/completions", json=body, headers={header: LONG}), 400, LONG, param)


async def test_a_long_content_type_is_echoed_as_a_prefix(client: httpx.AsyncClient) -> None:
    content_type = "text/" + LONG
    reply = await client.post("/v1/generate", content=b"x", headers={"Content-Type": content_type})
    assert_echoed(reply, 400, content_type, None)


async def test_a_long_authorization_scheme_and_acting_team_are_echoed_as_a_prefix(
    anonymous: httpx.AsyncClient, admin_key: str
) -> None:
    scheme = await anonymous.get("/v1/models", headers={"Authorization": f"{LONG} key"})
    assert scheme.status_code == 401 and f"({len(LONG):,} characters)" in scheme.json()["error"]["message"]
    team = await anonymous.get(
        "/v1/models", headers={"Authorization": f"Bearer {admin_key}", "X-Switchyard-Team": LONG}
    )
    assert team.status_code == 403 and f"({len(LONG):,} characters)" in team.json()["error"]["message"]
    assert len(scheme.content) < 2 * MAX_MESSAGE and len(team.content) < 2 * MAX_MESSAGE
