"""A `multipart/form-data` batch upload, read as it arrives: small text fields collected, the
file part streamed on without ever being held whole.

Starlette's `request.form()` spools the whole file before the route sees a byte; a 200 MB
batch would sit on disk twice and be validated only after it all arrived. Here the route
pulls the body itself, through python-multipart's streaming parser:

    reader = MultipartReader(request.stream(), request.headers.get("content-type", ""))
    fields = await reader.fields_before_file()   # e.g. {"model": ..., "deadline": ...}
    ... await ingest(reader.file_chunks(), validator, writer=..., limits=...)
    form = await reader.finish()                 # every field, the filename, late_fields

Clients (httpx, the OpenAI SDK, `curl -F`) send fields in the order given, usually before the
file. A field sent after the file still arrives in `finish()` (named in `late_fields`), and the
caller then validates in a second pass over the stored file.

Every problem with the body is a `MultipartError`, whose message the route returns with a 400.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from contracts.caller_echo import echoed

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

MAX_FIELD_BYTES = 64 * 1024  # a text field holds a model id or a deadline, never a payload
MAX_FIELDS = 32


class MultipartError(Exception):
    """The request body is not a usable upload (the route answers 400 with the message)."""


@dataclass(frozen=True, slots=True)
class UploadedForm:
    fields: dict[str, str]  # every text field, in the order sent
    filename: str | None  # as the client named the file part, if it did
    file_bytes: int
    late_fields: tuple[str, ...]  # text fields that came after the file part


class MultipartReader:
    """One upload's body, pulled through the parser only as far as the caller asks.

    Phases, in order: `fields_before_file()`, `file_chunks()` (once), `finish()`. Parser
    callbacks only record what they see; the async methods pull body pieces until what they
    wait for has been recorded, so at most one body piece of file data is buffered.
    """

    def __init__(
        self,
        body: AsyncIterator[bytes],
        content_type: str,
        *,
        file_field: str = "file",
        max_field_bytes: int = MAX_FIELD_BYTES,
        max_fields: int = MAX_FIELDS,
    ) -> None:
        kind, options = parse_options_header(content_type)
        if kind != b"multipart/form-data":
            raise MultipartError(
                f"send the batch as multipart/form-data with the JSONL file in a {file_field!r} part; "
                f"got Content-Type {echoed(content_type)}"
            )
        boundary = options.get(b"boundary")
        if not boundary:
            raise MultipartError(
                "the multipart Content-Type has no boundary: let the HTTP client set Content-Type itself"
            )
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._on_part_begin,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_end": self._on_end,
        }
        try:
            self._parser = MultipartParser(boundary, callbacks)
        except FormParserError as exc:
            raise MultipartError(f"invalid multipart boundary: {exc}") from None
        self._body = body
        self._file_field = file_field
        self._max_field_bytes = max_field_bytes
        self._max_fields = max_fields
        self.filename: str | None = None
        self._fields: dict[str, str] = {}
        self._before: dict[str, str] | None = None  # the fields when the file part began
        self._late: list[str] = []
        self._file_data: deque[bytes] = deque()
        self._file_bytes = 0
        self._file_closed = self._ended = self._file_taken = False
        # The part being parsed: its headers so far, and which kind it is.
        self._headers: dict[bytes, bytes] = {}
        self._header_name = self._header_value = b""
        self._part_name: str | None = None  # a text field's name; None for the file part
        self._text = bytearray()

    async def fields_before_file(self) -> dict[str, str]:
        """The text fields sent before the file part; raises MultipartError when there is none."""
        while self._before is None:
            if not await self._pull():
                early = "" if self._ended else " (the body ended before its closing boundary)"
                raise MultipartError(f"no {self._file_field!r} part in the form: attach the JSONL file as it{early}")
        return dict(self._before)

    async def file_chunks(self) -> AsyncIterator[bytes]:
        """The file part's bytes, as they arrive; raises MultipartError if the body is cut short."""
        if self._file_taken:
            raise RuntimeError("the file part can be read only once")
        self._file_taken = True
        await self.fields_before_file()
        while True:
            while self._file_data:
                yield self._file_data.popleft()
            if self._file_closed:
                return
            if not await self._pull():
                raise MultipartError(f"the upload ended in the middle of the {self._file_field!r} part: send it again")

    async def finish(self) -> UploadedForm:
        """Read the rest of the body (file bytes not taken are dropped) and return the whole form."""
        await self.fields_before_file()
        while not self._ended:
            self._file_data.clear()
            if not await self._pull():
                raise MultipartError("the multipart body ended before its closing boundary: send it again")
        self._file_data.clear()
        return UploadedForm(dict(self._fields), self.filename, self._file_bytes, tuple(self._late))

    async def _pull(self) -> bool:
        """Feed the parser one more piece of the body; False when the body has ended."""
        try:
            piece = await anext(self._body)
        except StopAsyncIteration:
            return False
        if piece:
            try:
                self._parser.write(piece)
            except FormParserError as exc:
                raise MultipartError(f"the body is not valid multipart/form-data: {exc}") from None
        return True

    # Parser callbacks: they run inside `parser.write` and only record.

    def _on_part_begin(self) -> None:
        self._headers = {}
        self._part_name = None
        self._text = bytearray()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        self._headers[self._header_name.lower()] = self._header_value
        self._header_name = self._header_value = b""

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition"))
        raw_name = options.get(b"name")
        if raw_name is None:
            raise MultipartError("a form part has no name (Content-Disposition: form-data; name=...)")
        name = _text(raw_name)
        if name == self._file_field:
            if self._before is not None:
                raise MultipartError(f"the form holds more than one {echoed(name)} part: send one file per batch")
            raw_filename = options.get(b"filename")
            self.filename = None if raw_filename is None else _text(raw_filename)
            self._before = dict(self._fields)
        elif b"filename" in options:
            raise MultipartError(f"unexpected file part {echoed(name)}: send the JSONL file as {self._file_field!r}")
        elif name in self._fields:
            raise MultipartError(f"form field {echoed(name)} is given twice")
        elif len(self._fields) >= self._max_fields:
            raise MultipartError(f"the form holds more than {self._max_fields} fields")
        else:
            self._part_name = name

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._part_name is None:  # the file part
            if end > start:
                self._file_data.append(data[start:end])
                self._file_bytes += end - start
            return
        if len(self._text) + end - start > self._max_field_bytes:
            limit_kb = self._max_field_bytes // 1024
            raise MultipartError(f"form field {echoed(self._part_name)} is larger than {limit_kb} KB")
        self._text += data[start:end]

    def _on_part_end(self) -> None:
        name = self._part_name
        if name is None:
            self._file_closed = True
            return
        try:
            self._fields[name] = self._text.decode("utf-8")
        except UnicodeDecodeError:
            raise MultipartError(f"form field {echoed(name)} is not UTF-8 text") from None
        if self._before is not None:
            self._late.append(name)

    def _on_end(self) -> None:
        self._ended = True


def _text(raw: bytes) -> str:
    """A header parameter: python-multipart hands back its raw bytes; clients send UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
