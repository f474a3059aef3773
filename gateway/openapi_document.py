"""The OpenAPI document with the server's own integer bounds.

FastAPI validates the document through its `Schema` model, whose `minimum` and `maximum` are
floats: an int64 bound (a seed's 2^63 - 1) came out as `9.223372036854776e+18`, a number past
what the server accepts and not an integer. Here the document is built by FastAPI,
then every bound of an integer schema is put back as the integer it was: integral floats up to
2^53 convert exactly, and the wider ones are the 64-bit limits the fields declare.
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


def install_openapi(app: FastAPI) -> None:
    """Serve `app`'s document with integer bounds as integers (built once, on first request)."""

    built_by_fastapi = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_integer_bounds(built_by_fastapi())
        return app.openapi_schema

    builder: Callable[[], dict[str, Any]] = document
    app.openapi = builder  # type: ignore[method-assign]
