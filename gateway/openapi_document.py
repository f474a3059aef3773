"""The OpenAPI document with the server's own integer bounds.

FastAPI validates the document through its `Schema` model, whose `minimum` and `maximum` are
floats: an int64 bound (a seed's 2^63 - 1) came out as `9.223372036854776e+18`, a number past
what the server accepts and not an integer. Here the document is built by FastAPI,
then every bound of an integer schema is put back as the integer it was: integral floats up to
2^53 convert exactly, and the wider ones are the 64-bit limits the fields declare.

A header is absent or a value: FastAPI writes an optional header as "the value or null", and a
client reading that sends the text `null` (schemathesis did, and got the 400 the server gives
it). Each header parameter's schema is its value's schema alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from contracts.schemas import INT64_MAX, INT64_MIN

_EXACT_FLOAT = 2**53  # integers up to here survive a float unchanged
_WIDE_BOUNDS = {float(bound): bound for bound in (INT64_MIN, INT64_MAX)}
_BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def integer_bound(value: float) -> int:
    """The integer bound a float in the document stands for; ValueError when none is known."""
    if value.is_integer() and abs(value) <= _EXACT_FLOAT:
        return int(value)
    if value in _WIDE_BOUNDS:
        return _WIDE_BOUNDS[value]
    raise ValueError(f"an integer bound of {value!r} lost its exact value; add it to the known 64-bit bounds")


def with_integer_bounds(node: Any) -> Any:
    """`node` (the document or a part of it) with every integer schema's bounds as integers."""
    if isinstance(node, list):
        return [with_integer_bounds(item) for item in node]
    if not isinstance(node, dict):
        return node
    fixed = {key: with_integer_bounds(value) for key, value in node.items()}
    if fixed.get("type") == "integer":
        for key in _BOUND_KEYS:
            if isinstance(fixed.get(key), float):
                fixed[key] = integer_bound(fixed[key])
    return fixed


def without_null_headers(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with every header parameter's schema stripped of its `null` alternative."""
    for operation in (op for item in document.get("paths", {}).values() for op in item.values()):
        for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
            schema = parameter.get("schema", {})
            values = [option for option in schema.get("anyOf", []) if option.get("type") != "null"]
            if parameter.get("in") == "header" and len(values) == 1:
                kept = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
                parameter["schema"] = {**values[0], **kept}
    return document


def install_openapi(app: FastAPI) -> None:
    """Serve `app`'s document with integer bounds as integers and headers that are never null
    (built once, on first request)."""

    built_by_fastapi = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = without_null_headers(with_integer_bounds(built_by_fastapi()))
        return app.openapi_schema

    builder: Callable[[], dict[str, Any]] = document
    app.openapi = builder  # type: ignore[method-assign]
