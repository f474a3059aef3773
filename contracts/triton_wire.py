"""Triton's wire form of a tensor's contents in a gRPC message (`raw_input_contents`,
`raw_output_contents`): numbers packed little-endian, BYTES elements each after its length.

    INT32 [3]      01 00 00 00  02 00 00 00  03 00 00 00
    BYTES [2]      02 00 00 00 'h' 'i'   00 00 00 00          ("hi", "")

Read with `struct` straight into Python values: what a reader of a few small tensors per
message wants, without a numpy array per tensor on the way (the gateway reads seven of them
for every streamed response).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

# Triton's numeric datatypes as struct codes (sizes are struct's standard ones with "<").
_CODES = {
    "BOOL": "?",
    "INT8": "b",
    "UINT8": "B",
    "INT16": "h",
    "UINT16": "H",
    "INT32": "i",
    "UINT32": "I",
    "INT64": "q",
    "UINT64": "Q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
}


def split_bytes(raw: bytes) -> list[bytes] | None:
    """A BYTES tensor's elements; None when the contents do not parse."""
    values: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            return None
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            return None
        values.append(raw[offset : offset + length])
        offset += length
    return values


def first_bytes(raw: bytes) -> bytes | None:
    """A BYTES tensor's first element (b"" when it has none); None when it does not parse."""
    if not raw:
        return b""
    if len(raw) < 4:
        return None
    (length,) = struct.unpack_from("<I", raw)
    return raw[4 : 4 + length] if 4 + length <= len(raw) else None


def raw_numbers(raw: bytes, datatype: str) -> tuple[Any, ...] | None:
    """A numeric tensor's elements as Python values; None when the length is not a whole
    number of elements. ValueError for a datatype that is not numeric (BYTES)."""
    code = _CODES.get(datatype)
    if code is None:
        raise ValueError(f"{datatype} is not a numeric Triton datatype")
    size = struct.calcsize(f"<{code}")
    count, rest = divmod(len(raw), size)
    if rest:
        return None
    return struct.unpack(f"<{count}{code}", raw)


def raw_contents(array: np.ndarray[Any, Any], datatype: str) -> bytes:
    """`array`'s elements in the wire form of `datatype` (BYTES: bytes elements)."""
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(value)) + value for value in array.reshape(-1))
    code = _CODES.get(datatype)
    if code is None:
        raise ValueError(f"{datatype} is not a Triton datatype")
    return array.astype(np.dtype(code).newbyteorder("<")).tobytes()
