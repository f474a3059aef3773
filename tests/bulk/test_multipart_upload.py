"""Multipart uploads read as they arrive: fields before and after the file, the file streamed
in pieces (never whole), and a clear MultipartError for every body that is not an upload."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from bulk.multipart_upload import MultipartError, MultipartReader, UploadedForm

BOUNDARY = "b0undary"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
# A file that holds text looking like a boundary, CRLFs and a partial delimiter.
FILE = b'{"prompt": "a"}\r\n--b0undar\r\n{"prompt": "\\r\\n--b0undary"}\n' * 50


def _httpx_body(fields: dict[str, str], file: bytes, filename: str = "batch.jsonl") -> tuple[bytes, str]:
    """The body and Content-Type httpx (and so the OpenAI SDK) sends: fields first, then files."""
    request = httpx.Request("POST", "http://gateway/v1/batches", data=fields, files={"file": (filename, file)})
    return request.read(), request.headers["content-type"]


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


def _body(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


class Body:
    """A request body in fixed-size pieces, counting how many were pulled."""

    def __init__(self, data: bytes, piece: int) -> None:
        self.pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            self.pulled += 1
            yield piece


async def _read_all(reader: MultipartReader) -> tuple[dict[str, str], bytes, UploadedForm]:
    before = await reader.fields_before_file()
    data = b"".join([piece async for piece in reader.file_chunks()])
    return before, data, await reader.finish()


@pytest.mark.parametrize("piece", [1, 7, 64 * 1024])
async def test_fields_before_the_file_as_httpx_sends_them(piece: int) -> None:
    data, content_type = _httpx_body({"model": "m", "deadline": "24h"}, FILE, "my batch.jsonl")
    reader = MultipartReader(Body(data, piece).__aiter__(), content_type)
    before, file, form = await _read_all(reader)
    assert before == {"model": "m", "deadline": "24h"}
    assert file == FILE
    assert form == UploadedForm({"model": "m", "deadline": "24h"}, "my batch.jsonl", len(FILE), ())


async def test_fields_after_the_file_arrive_at_finish() -> None:
    data = _body(
        _part("model", b"m"), _part("file", FILE, "in.jsonl"), _part("deadline", b"6h"), _part("x", "é".encode())
    )
    reader = MultipartReader(Body(data, 5).__aiter__(), CONTENT_TYPE)
    before, file, form = await _read_all(reader)
    assert before == {"model": "m"}
    assert file == FILE
    assert form.fields == {"model": "m", "deadline": "6h", "x": "é"}
    assert form.late_fields == ("deadline", "x")


async def test_the_file_is_streamed_not_held() -> None:
    file = b'{"prompt": "p", "max_tokens": 1}\n' * 10_000  # 340 KB
    body = Body(_body(_part("model", b"m"), _part("file", file, "f")), 4096)
    reader = MultipartReader(body.__aiter__(), CONTENT_TYPE)
    await reader.fields_before_file()
    chunks = reader.file_chunks()
    first = await anext(chunks)
    assert 0 < len(first) <= 4096 and body.pulled <= 2  # one piece ahead at most, not the whole body
    rest = b"".join([piece async for piece in chunks])
    assert first + rest == file and body.pulled == len(body.pieces)


async def test_a_file_part_without_filename_still_counts() -> None:
    reader = MultipartReader(Body(_body(_part("file", b"{}\n")), 10).__aiter__(), CONTENT_TYPE)
    _, file, form = await _read_all(reader)
    assert (file, form.filename, form.fields) == (b"{}\n", None, {})


async def test_finish_drops_file_bytes_nobody_read() -> None:
    reader = MultipartReader(Body(_body(_part("file", FILE, "f"), _part("model", b"m")), 100).__aiter__(), CONTENT_TYPE)
    assert await reader.fields_before_file() == {}
    form = await reader.finish()
    assert form.fields == {"model": "m"} and form.file_bytes == len(FILE)


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        ("application/json", "send the batch as multipart/form-data with the JSONL file in a 'file' part"),
        ("", "got Content-Type ''"),
        ("multipart/form-data", "has no boundary"),
        ("multipart/form-data; boundary=" + "x" * 300, "invalid multipart boundary"),
    ],
)
def test_bodies_that_are_not_multipart(content_type: str, message: str) -> None:
    with pytest.raises(MultipartError, match=message):
        MultipartReader(Body(b"", 1).__aiter__(), content_type)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_body(_part("model", b"m")), "no 'file' part in the form: attach the JSONL file as it$"),
        (b"", r"no 'file' part in the form: .* \(the body ended before its closing boundary\)"),
        (
            _body(_part("model", b"x" * (64 * 1024 + 1)), _part("file", b"{}")),
            "form field 'model' is larger than 64 KB",
        ),
        (_body(_part("model", b"\xff"), _part("file", b"{}")), "form field 'model' is not UTF-8 text"),
        (_body(_part("model", b"a"), _part("model", b"b"), _part("file", b"{}")), "form field 'model' is given twice"),
        (_body(_part("upload", b"{}", "f.jsonl")), "unexpected file part 'upload': send the JSONL file as 'file'"),
        (b"--" + BOUNDARY.encode() + b"\r\nContent-Type: text/plain\r\n\r\nx\r\n", "a form part has no name"),
        (b"this is not multipart at all", "the body is not valid multipart/form-data"),
    ],
)
async def test_forms_without_a_usable_file_part(data: bytes, message: str) -> None:
    reader = MultipartReader(Body(data, 9).__aiter__(), CONTENT_TYPE)
    with pytest.raises(MultipartError, match=message):
        await reader.fields_before_file()


async def test_two_file_parts_are_refused() -> None:
    reader = MultipartReader(Body(_body(_part("file", b"{}"), _part("file", b"{}")), 1000).__aiter__(), CONTENT_TYPE)
    with pytest.raises(MultipartError, match="more than one 'file' part"):
        await _read_all(reader)


async def test_a_body_cut_short_in_the_file_is_an_error_not_a_shorter_file() -> None:
    data = _body(_part("model", b"m"), _part("file", FILE, "f"))
    reader = MultipartReader(Body(data[: len(data) // 2], 64).__aiter__(), CONTENT_TYPE)
    await reader.fields_before_file()
    with pytest.raises(MultipartError, match="the upload ended in the middle of the 'file' part"):
        [piece async for piece in reader.file_chunks()]


async def test_a_body_cut_short_after_the_file_is_an_error() -> None:
    data = _body(_part("file", b"{}\n", "f"), _part("deadline", b"6h"))
    reader = MultipartReader(Body(data[:-10], 64).__aiter__(), CONTENT_TYPE)
    await reader.fields_before_file()
    assert b"".join([piece async for piece in reader.file_chunks()]) == b"{}\n"
    with pytest.raises(MultipartError, match="ended before its closing boundary"):
        await reader.finish()


async def test_too_many_fields() -> None:
    parts = [_part(f"f{i}", b"v") for i in range(4)]
    reader = MultipartReader(Body(_body(*parts, _part("file", b"{}")), 1000).__aiter__(), CONTENT_TYPE, max_fields=3)
    with pytest.raises(MultipartError, match="more than 3 fields"):
        await reader.fields_before_file()
