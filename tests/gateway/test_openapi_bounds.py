"""Where the OpenAPI document and the server meet: each bound the document states is the bound
the server keeps, so what the document admits is answered and what it refuses is a 400 (the
disagreements schemathesis found, each pinned here at the boundary)."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from contracts.field_checks import MAX_STOP_CHARS, MAX_STOP_STRINGS, MIN_TOP_P
from gateway.openapi_document import integer_bound
from tests.gateway.conftest import FakeBackend

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00\x00:~\x9bU"
GENERATE = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 2}
COMPLETION = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 2}
CHAT = {"model": "small", "messages": [{"role": "user", "content": "the fox"}], "max_tokens": 2}
BODIES = {"/v1/generate": GENERATE, "/v1/completions": COMPLETION, "/v1/chat/completions": CHAT}

pytestmark = pytest.mark.usefixtures("chat_template")


@pytest.fixture
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    document: dict[str, Any] = (await client.get("/openapi.json")).json()
    return document


def body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema: dict[str, Any] = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def field_schema(spec: dict[str, Any], path: str, name: str) -> list[dict[str, Any]]:
    """The field's alternatives (anyOf), null left out."""
    field = body_schema(spec, path)["properties"][name]
    return [option for option in field.get("anyOf", [field]) if option.get("type") != "null"]


@pytest.mark.parametrize("path", list(BODIES))
async def test_top_p_starts_where_the_document_says(
    client: httpx.AsyncClient, spec: dict[str, Any], backend: FakeBackend, path: str
) -> None:
    (number,) = field_schema(spec, path, "top_p")
    assert number == {"type": "number", "minimum": MIN_TOP_P, "maximum": 1.0}
    assert (await client.post(path, json={**BODIES[path], "top_p": MIN_TOP_P})).status_code == 200
    for below in (math.nextafter(MIN_TOP_P, 0.0), 1e-45, 5e-324, 0.0):
        reply = await client.post(path, json={**BODIES[path], "top_p": below})
        assert reply.status_code == 400, (below, reply.text)
        assert reply.json()["error"]["param"] == "top_p"
        assert f"send at least {MIN_TOP_P!r}" in reply.json()["error"]["message"]
    assert len(backend.requests) == 1


@pytest.mark.parametrize("path", list(BODIES))
async def test_an_empty_stop_string_is_refused_as_the_document_says(
    client: httpx.AsyncClient, spec: dict[str, Any], backend: FakeBackend, path: str
) -> None:
    text = {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}
    assert field_schema(spec, path, "stop") == [text, {"type": "array", "items": text, "maxItems": MAX_STOP_STRINGS}]
    for stop, param in (("", "stop.0"), ([""], "stop.0"), (["a", ""], "stop.1")):
        reply = await client.post(path, json={**BODIES[path], "stop": stop})
        assert reply.status_code == 400, (stop, reply.text)
        assert reply.json()["error"]["param"] == param
        assert "at least 1 character" in reply.json()["error"]["message"]
    for stop in (None, "x" * MAX_STOP_CHARS, ["a"] * MAX_STOP_STRINGS):
        assert (await client.post(path, json={**BODIES[path], "stop": stop})).status_code == 200, stop
    assert len(backend.requests) == 3


async def test_one_prompt_is_a_string_or_a_list_of_one(
    client: httpx.AsyncClient, spec: dict[str, Any], backend: FakeBackend
) -> None:
    text = {"type": "string", "minLength": 1}
    assert field_schema(spec, "/v1/completions", "prompt") == [
        text, {"type": "array", "items": text, "minItems": 1, "maxItems": 1}
    ]  # fmt: skip
    for prompt in ([], ["a", "b"], [""], ""):
        reply = await client.post("/v1/completions", json={**COMPLETION, "prompt": prompt})
        assert reply.status_code == 400, (prompt, reply.text)
    assert (await client.post("/v1/completions", json={**COMPLETION, "prompt": ["fox"]})).status_code == 200


@pytest.mark.parametrize(
    ("field", "refused", "schema"),
    [
        ("n", 2, [{"type": "integer", "const": 1}]),
        ("presence_penalty", 0.5, [{"type": "integer", "const": 0}, {"type": "number", "const": 0.0}]),
        ("logit_bias", {"50256": -100}, [{"type": "object", "properties": {}, "additionalProperties": False}]),
        ("store", True, [{"type": "boolean", "const": False}]),
    ],
)
async def test_fields_the_gateway_cannot_honour_are_documented_at_their_neutral_values(
    client: httpx.AsyncClient, spec: dict[str, Any], field: str, refused: object, schema: list[dict[str, Any]]
) -> None:
    assert field_schema(spec, "/v1/chat/completions", field) == schema
    reply = await client.post("/v1/chat/completions", json={**CHAT, field: refused})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == field


@pytest.mark.parametrize(
    ("path", "field", "bound", "base"),
    [
        ("/v1/chat/completions", "top_logprobs", ("maximum", 20), {"logprobs": True}),
        ("/v1/completions", "logprobs", ("maximum", 5), {}),
        ("/v1/chat/completions", "tools", ("maxItems", 128), {"tool_choice": "none"}),  # not shown: a short prompt
    ],
)
async def test_structured_output_and_logprob_bounds_are_the_documents(
    client: httpx.AsyncClient,
    spec: dict[str, Any],
    path: str,
    field: str,
    bound: tuple[str, int],
    base: dict[str, Any],
) -> None:
    (schema,) = field_schema(spec, path, field)
    key, limit = bound
    assert schema[key] == limit
    if field == "tools":
        tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(limit + 1)]
        over: object = tools
        at: object = tools[:limit]
    else:
        over, at = limit + 1, limit
    body = {**BODIES[path], **base}
    assert (await client.post(path, json={**body, field: at})).status_code == 200
    reply = await client.post(path, json={**body, field: over})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == field


async def test_an_empty_after_is_refused_as_the_document_says(client: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    (after,) = [p for p in spec["paths"]["/v1/batches"]["get"]["parameters"] if p["name"] == "after"]
    assert {"type": "string", "minLength": 1} in after["schema"]["anyOf"]
    reply = await client.get("/v1/batches", params={"after": ""})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "query.after"
    assert "at least 1 character" in reply.json()["error"]["message"]
    refusals = spec["paths"]["/v1/batches"]["get"]["responses"]["400"]["description"]
    assert "`after` that names none of your batches" in refusals


@pytest.mark.parametrize("path", ["/v1/files", "/v1/batches"])
async def test_an_upload_that_is_not_jsonl_is_a_documented_400(
    client: httpx.AsyncClient, spec: dict[str, Any], path: str
) -> None:
    fields = {"purpose": "batch"} if path == "/v1/files" else {"model": "small"}
    reply = await client.post(path, data=fields, files={"file": ("image.png", PNG, "image/png")})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["param"], error["type"]) == ("file", "invalid_request_error")
    assert "not JSONL" in error["message"]
    assert "not JSONL" in spec["paths"][path]["post"]["responses"]["400"]["description"]
    assert (await client.get(path)).json()["data"] == []  # nothing kept


async def test_batch_metadata_is_bounded_as_the_document_says(client: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    create = spec["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    (bounds,) = [option for option in create["properties"]["metadata"]["anyOf"] if option["type"] == "object"]
    assert bounds == {
        "type": "object",
        "maxProperties": 16,
        "propertyNames": {"maxLength": 64},
        "additionalProperties": {"type": "string", "maxLength": 512},
    }
    body = {"input_file_id": "file-none", "endpoint": "/v1/completions"}
    for metadata in ({str(i): "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513}):
        reply = await client.post("/v1/batches", json={**body, "metadata": metadata})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "metadata"
    at_the_bounds = {**{str(i): "v" for i in range(15)}, "k" * 64: "v" * 512}
    reply = await client.post("/v1/batches", json={**body, "metadata": at_the_bounds})
    assert reply.status_code == 404  # past validation: the file is what is missing


@pytest.mark.parametrize("path", list(BODIES))
async def test_seed_bounds_are_the_servers_int64_limits_as_integers(
    client: httpx.AsyncClient, spec: dict[str, Any], path: str
) -> None:
    (integer,) = field_schema(spec, path, "seed")
    assert integer == {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
    assert all(type(integer[key]) is int for key in ("minimum", "maximum"))
    assert (await client.post(path, json={**BODIES[path], "seed": 2**63 - 1})).status_code == 200
    assert (await client.post(path, json={**BODIES[path], "seed": 2**63})).status_code == 400


async def test_every_integer_bound_in_the_document_is_an_integer(spec: dict[str, Any]) -> None:
    def bounds(node: Any) -> list[Any]:
        if isinstance(node, list):
            return [b for item in node for b in bounds(item)]
        if not isinstance(node, dict):
            return []
        own = [node[k] for k in ("minimum", "maximum") if node.get("type") == "integer" and k in node]
        return own + [b for value in node.values() for b in bounds(value)]

    found = bounds(spec)
    assert found and all(type(bound) is int for bound in found)


def test_a_wide_bound_that_is_not_known_is_refused_not_rounded() -> None:
    assert integer_bound(9.223372036854776e18) == 2**63 - 1
    assert integer_bound(-9.223372036854776e18) == -(2**63)
    assert integer_bound(4096.0) == 4096
    with pytest.raises(ValueError, match="lost its exact value"):
        integer_bound(1.8446744073709552e19)


async def test_no_header_is_documented_as_null(client: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    """An optional header is absent or a value: the document never offers `null` (a client that
    sent the text `null` for x-slo-ttft-ms got a 400 the document had not warned of)."""
    headers = [
        (path, parameter)
        for path, item in spec["paths"].items()
        for operation in item.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "header"
    ]
    assert any(parameter["name"] == "x-slo-ttft-ms" for _, parameter in headers)
    for path, parameter in headers:
        assert "null" not in str(parameter["schema"]), (path, parameter)
    ttft = next(p for path, p in headers if path == "/v1/generate" and p["name"] == "x-slo-ttft-ms")
    assert ttft["schema"] == {"type": "integer", "minimum": 1, "maximum": 3_600_000, "title": "X-Slo-Ttft-Ms"}
    refused = await client.post("/v1/generate", json=GENERATE, headers={"x-slo-ttft-ms": "null"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "header.x-slo-ttft-ms"
