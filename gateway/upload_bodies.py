"""The bodies of the upload routes as the OpenAPI document shows them.

`POST /v1/files` and `POST /v1/batches` read their bodies by hand (multipart, streamed to the
blob store and validated as they arrive: gateway/routes/files.py, batches.py), so FastAPI
cannot see them; each route declares its body here with `openapi_extra`:

    POST /v1/files      multipart/form-data  purpose ("batch"), file (JSONL)
    POST /v1/batches    multipart/form-data  model, deadline?, file (JSONL)       native
                        application/json     CreateBatchBody                      OpenAI
"""

from __future__ import annotations

from typing import Any

from gateway.batch_schemas import CreateBatchBody

_JSONL_FILE: dict[str, object] = {"type": "string", "format": "binary", "description": "JSONL, one request a line"}
_FILE_ENCODING = {"file": {"contentType": "application/jsonl, application/octet-stream"}}


def _form(required: list[str], **fields: dict[str, object]) -> dict[str, object]:
    return {"type": "object", "required": required, "properties": fields, "additionalProperties": False}


def inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` written in place of each `$ref` to them: pydantic's refs
    (`#/$defs/X`) would point at the document's root once the schema sits inside it."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


UPLOAD_FILE_BODY: dict[str, object] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": _form(["purpose", "file"], purpose={"type": "string", "enum": ["batch"]}, file=_JSONL_FILE),
                "encoding": _FILE_ENCODING,
            }
        },
    }
}

CREATE_BATCH_BODY: dict[str, object] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": _form(
                    ["model", "file"],
                    model={"type": "string", "description": "a model id from GET /v1/models"},
                    deadline={"type": "string", "description": "6h, 90m, or an RFC 3339 time; at most 24h"},
                    file=_JSONL_FILE,
                ),
                "encoding": _FILE_ENCODING,
            },
            "application/json": {"schema": inline_defs(CreateBatchBody.model_json_schema())},
        },
    }
}
