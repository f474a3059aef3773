"""Checks every request body shares: text a model server can take, and numbers that keep their
meaning once converted to the `llm` tensor's dtype (contracts/llm_tensors.py).

Why at the edge: what passes here goes to a model server as is. A value the server refuses
(top_p 1e-50 is 0.0 as FP32, which the engine refuses) used to read as a server failure, and a
text that cannot be encoded as UTF-8 (JSON may spell a lone surrogate, "\\ud800") as a 500.
Each bound is the OpenAPI document's too (`minimum`, `maxLength`, ...), so what the document
admits the gateway takes, and what it refuses the gateway refuses.

    field        tensor  accepted here (= what the engine accepts after conversion)
    max_tokens   INT32   1 .. 2^31-1 (and prompt + max_tokens within the context, later)
    temperature  FP32    0 .. 2, finite
    top_p        FP32    MIN_TOP_P (the smallest positive FP32, ~1.4e-45) .. 1
    top_k        INT32   0 .. 2^31-1
    seed         INT64   -2^63 .. 2^63-1
    stop         BYTES   a string or at most MAX_STOP_STRINGS strings of 1..MAX_STOP_CHARS characters
    any text     BYTES   valid Unicode (no lone surrogates), so it encodes to UTF-8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError

from contracts.caller_echo import echoed

MAX_STOP_STRINGS = 4
# A stop string is tokenized by the model server and searched for in every delta: bounded so
# that one request's stop strings cost the server what any other request's do.
MAX_STOP_CHARS = 256

# A batch's metadata, as OpenAI bounds it: stored with the batch and shown on every read.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512

# The smallest top_p that is still above 0 as FP32 (the engine refuses 0). Below it a value is
# refused even where FP32 would round it up (1e-45 is 1.4e-45 as FP32): the bound is one number,
# the same in the document and here.
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
                return f"key {echoed(key)}: {problem}" if isinstance(key, str) else problem
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


def top_p_floor(value: float) -> float:
    """`top_p` at least MIN_TOP_P (AfterValidator): below it the engine's FP32 tensor would hold 0,
    or a value FP32 rounds up to it, which the document's `minimum` does not admit either."""
    if value < MIN_TOP_P:
        raise PydanticCustomError(
            "below_float32_minimum", "is below the smallest positive 32-bit float: send at least {minimum}",
            {"minimum": MIN_TOP_P},
        )  # fmt: skip
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
                f"key {echoed(key)} is too long: at most {MAX_METADATA_KEY_CHARS} characters are allowed",
            )
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise PydanticCustomError(
                "metadata_too_large",
                f"the value of {echoed(key)} has {len(value):,} characters; "
                f"at most {MAX_METADATA_VALUE_CHARS} are allowed",
            )
    return metadata
