"""Triton's wire form of tensor contents: what tritonclient writes reads back exactly, and
contents that do not parse are told apart from empty ones."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor

from contracts.triton_wire import first_bytes, raw_contents, raw_numbers, split_bytes


def raw_bytes(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def test_split_bytes_never_reads_past_the_end() -> None:
    assert split_bytes(raw_bytes(b"ab", b"")) == [b"ab", b""]
    assert split_bytes(b"") == []
    assert split_bytes(b"\x01\x00") is None and split_bytes(b"\xff\xff\xff\xffab") is None


def test_first_bytes_reads_the_first_element_only() -> None:
    assert first_bytes(raw_bytes("héllo".encode(), b"second")) == "héllo".encode()
    assert first_bytes(b"") == b"" and first_bytes(raw_bytes(b"")) == b""
    assert first_bytes(b"\x05\x00") is None and first_bytes(b"\x05\x00\x00\x00ab") is None


@pytest.mark.parametrize(
    ("datatype", "values"),
    [
        ("INT32", [1, -2, 2**31 - 1]),
        ("INT64", [2**40, -1]),
        ("FP32", [0.5, -1.25]),
        ("FP64", [1e300]),
        ("BOOL", [True, False]),
        ("UINT8", [255]),
    ],
)
def test_numbers_read_back_as_numpy_wrote_them(datatype: str, values: list[object]) -> None:
    dtype = {"INT32": "<i4", "INT64": "<i8", "FP32": "<f4", "FP64": "<f8", "BOOL": "?", "UINT8": "u1"}[datatype]
    raw = np.array(values, dtype=dtype).tobytes()
    assert raw_numbers(raw, datatype) == tuple(np.frombuffer(raw, dtype=dtype).tolist())
    assert raw_contents(np.array(values, dtype=dtype), datatype) == raw


def test_numbers_that_are_not_whole_elements_do_not_parse() -> None:
    assert raw_numbers(b"\x01\x00\x00", "INT32") is None
    assert raw_numbers(b"", "INT32") == ()
    with pytest.raises(ValueError, match="not a numeric"):
        raw_numbers(b"ab", "BYTES")


def test_bytes_contents_are_what_tritonclient_writes() -> None:
    array = np.array(["héllo".encode(), b""], dtype=np.object_)
    assert raw_contents(array, "BYTES") == serialize_byte_tensor(array).item()
