"""The OpenAPI document tells the truth: the bearer key on every keyed route, the error
object for each error status a route can give (and no 422, which never happens), and the
multipart bodies the upload routes read by hand. The error bodies themselves are OpenAI's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contracts.schemas import ErrorBody

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
KEYED_ERRORS = {"400", "401", "403", "503", "default"}
OPEN_ROUTES = {"/healthz", "/readyz", "/metrics"}


@pytest.fixture
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    reply = await client.get("/openapi.json")
    assert reply.status_code == 200
    document: dict[str, Any] = reply.json()
    return document


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


def error_schema(op: dict[str, Any], status: str) -> Any:
    return op["responses"][status]["content"]["application/json"]["schema"]


async def test_every_keyed_route_declares_the_bearer_scheme(spec: dict[str, Any]) -> None:
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key: `switchyard keys create TEAM`.",
    }
    for method, path, op in operations(spec):
        if path in OPEN_ROUTES:
            assert "security" not in op, (method, path)
        else:
            assert op["security"] == [{"HTTPBearer": []}], (method, path)


async def test_every_keyed_route_declares_its_error_responses(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        assert "422" not in op["responses"], (method, path)  # validation errors are 400s
        if path in OPEN_ROUTES:
            continue
        assert set(op["responses"]) >= KEYED_ERRORS, (method, path)
        for status in set(op["responses"]) - {"200", "202"}:
            assert error_schema(op, status) == ERROR_REF, (method, path, status)
    generation = {"400", "401", "403", "404", "409", "413", "429", "502", "503"}
    for path in ("/v1/generate", "/v1/completions", "/v1/chat/completions"):
        assert generation <= set(spec["paths"][path]["post"]["responses"]), path
    assert {"404", "413"} <= set(spec["paths"]["/v1/batches"]["post"]["responses"])
    assert "413" in spec["paths"]["/v1/files"]["post"]["responses"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


async def test_the_error_object_is_openais(spec: dict[str, Any]) -> None:
    detail = spec["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"message", "type", "param", "code"}
    assert set(detail["properties"]["type"]["enum"]) == {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "rate_limit_error",
        "server_error",
    }


async def test_uploads_declare_their_multipart_bodies(spec: dict[str, Any]) -> None:
    upload = spec["paths"]["/v1/files"]["post"]["requestBody"]
    form = upload["content"]["multipart/form-data"]["schema"]
    assert upload["required"] and set(form["required"]) == {"file", "purpose"}
    assert form["properties"]["file"]["format"] == "binary"
    assert form["properties"]["purpose"]["enum"] == ["batch"]

    create = spec["paths"]["/v1/batches"]["post"]["requestBody"]["content"]
    form = create["multipart/form-data"]["schema"]
    assert set(form["required"]) == {"model", "file"} and "deadline" in form["properties"]
    assert form["properties"]["file"]["format"] == "binary"
    as_json = create["application/json"]["schema"]
    assert set(as_json["required"]) == {"input_file_id", "endpoint"}
    assert "completion_window" in as_json["properties"]


async def test_models_declare_created(spec: dict[str, Any]) -> None:
    assert "created" in spec["components"]["schemas"]["ModelCard"]["required"]


BAD_KEY = {"Authorization": "Bearer sy-nope"}
MISSING = {"model": "small"}
UNKNOWN = {"model": "small", "prompt": "a", "x": 1}
TOO_LONG = {"model": "small", "prompt": "the fox", "max_tokens": 10_000}
ERRORS = [
    ("GET", "/v1/models", {"Authorization": ""}, None, 401, "authentication_error", "invalid_api_key"),
    ("GET", "/v1/models", BAD_KEY, None, 401, "authentication_error", "invalid_api_key"),
    ("GET", "/v1/models/huge", {}, None, 404, "not_found_error", "model_not_found"),
    ("GET", "/v1/nothing", {}, None, 404, "not_found_error", "not_found"),
    ("PUT", "/v1/models", {}, None, 405, "invalid_request_error", "method_not_allowed"),
    ("POST", "/v1/generate", {}, MISSING, 400, "invalid_request_error", "missing_required_parameter"),
    ("POST", "/v1/completions", {}, UNKNOWN, 400, "invalid_request_error", "unknown_parameter"),
    ("POST", "/v1/generate", {}, TOO_LONG, 400, "invalid_request_error", "context_length_exceeded"),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status", "error_type", "code"), ERRORS)
async def test_errors_carry_openais_type_and_a_code(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any,
    status: int,
    error_type: str,
    code: str,
) -> None:
    reply = await client.request(method, path, headers=headers, json=body)
    assert reply.status_code == status, reply.text
    error = ErrorBody.model_validate(reply.json()).error  # the document's schema, strictly
    assert (error.type, error.code) == (error_type, code)
    assert list(reply.json()["error"]) == ["message", "type", "param", "code"]


async def test_every_reference_resolves_within_the_document(spec: dict[str, Any]) -> None:
    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return own + [ref for value in node.values() for ref in refs(value)]
        return [ref for item in node for ref in refs(item)] if isinstance(node, list) else []

    for ref in refs(spec):
        target: Any = spec
        for part in ref.removeprefix("#/").split("/"):
            assert isinstance(target, dict) and part in target, ref
            target = target[part]
