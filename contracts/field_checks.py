"""Checks every request body shares: text a model server can take, and numbers that keep their
meaning once converted to the `llm` tensor's dtype (contracts/llm_tensors.py).

Why at the edge: what passes here goes to a model server as is. A value the server refuses
(top_p 1e-50 is 0.0 as FP32, which the engine refuses) used to read as a server failure, and a
text that cannot be encoded as UTF-8 (JSON may spell a lone surrogate, "\\ud800") as a 500.

    field        tensor  accepted here (= what the engine accepts after conversion)
    max_tokens   INT32   1 .. 2^31-1 (and prompt + max_tokens within the context, later)
    temperature  FP32    0 .. 2, finite
    top_p        FP32    (0, 1] after conversion: at least the smallest positive FP32
    top_k        INT32   0 .. 2^31-1
    seed         INT64   -2^63 .. 2^63-1
    stop         BYTES   at most MAX_STOP_STRINGS strings of 1..MAX_STOP_CHARS characters
    any text     BYTES   valid Unicode (no lone surrogates), so it encodes to UTF-8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError

MAX_STOP_STRINGS = 4
# A stop string is tokenized by the model server and searched for in every delta: bounded so
# that one request's stop strings cost the server what any other request's do.
MAX_STOP_CHARS = 256

# A batch's metadata, as OpenAI bounds it: stored with the batch and shown on every read.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

# The smallest top_p that is still above 0 as FP32 (the engine refuses 0).
MIN_TOP_P = float(np.nextafter(np.float32(0), np.float32(1)))


def unicode_problem(value: object) -> str | None:
    """Where `value` (a string, or lists and mappings of them) is not valid Unicode text."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"a lone surrogate ({value[exc.start]!r}) at character {exc.start}"
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = unicode_problem(item)
            if problem is not None:
                return f"item {index}: {problem}"
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = unicode_problem(key) or unicode_problem(item)
            if problem is not None:
                return f"key {key!r}: {problem}" if isinstance(key, str) else problem
    return None


class UnicodeChecked(BaseModel):
    """A request body whose every text field (nested ones too) must be valid Unicode: a 400
    naming the field, not a 500 when the text is encoded for the model server."""

    @field_validator("*", mode="after")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        if isinstance(value, BaseModel):  # checked by its own validator
            return value
        problem = unicode_problem(value)
        if problem is not None:
            message = "must be valid Unicode text (UTF-8 encodable); it holds {problem}"
            raise PydanticCustomError("invalid_unicode", message, {"problem": problem})
        return value


def top_p_as_fp32(value: float) -> float:
    """`top_p` must stay above 0 once it is an FP32 (AfterValidator)."""
    if float(np.float32(value)) <= 0.0:
        raise PydanticCustomError("float32_underflow", f"is 0 as a 32-bit float: send at least {MIN_TOP_P:.3g}")
    return value


def stop_lengths(stops: list[str]) -> list[str]:
    """Each stop string within MAX_STOP_CHARS characters (AfterValidator)."""
    for index, stop in enumerate(stops):
        if len(stop) > MAX_STOP_CHARS:
            raise PydanticCustomError(
                "stop_too_long",
                "stop string {index} has {length} characters; at most {limit} are allowed",
                {"index": index, "length": len(stop), "limit": MAX_STOP_CHARS},
            )
    return stops


def metadata_bounds(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """A batch's metadata within OpenAI's bounds (AfterValidator): at most MAX_METADATA_PAIRS
    pairs, keys of at most MAX_METADATA_KEY_CHARS characters, values of at most
    MAX_METADATA_VALUE_CHARS."""
    if metadata is None:
        return None
    if len(metadata) > MAX_METADATA_PAIRS:
        raise PydanticCustomError(
            "metadata_too_large", f"has {len(metadata)} pairs; at most {MAX_METADATA_PAIRS} are allowed"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise PydanticCustomError(
                "metadata_too_large",
                f"key {key[:16]!r}... has {len(key)} characters; at most {MAX_METADATA_KEY_CHARS} are allowed",
            )
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise PydanticCustomError(
                "metadata_too_large",
                f"the value of {key!r} has {len(value)} characters; at most {MAX_METADATA_VALUE_CHARS} are allowed",
            )
    return metadata
