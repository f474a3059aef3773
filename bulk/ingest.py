"""An uploaded batch file, streamed once: every byte into the blob store, every line validated,
and the valid ones grouped into chunk references for the queue.

The queue never holds request payloads, only where they are in the stored file:

    stored file   | line 1 \\n | line 2 \\n | (blank) \\n | line 4 \\n | ... | line 256 \\n | line 257 \\n | ...
                  ^ byte_start of chunk 1                               byte_end ^ byte_start of chunk 2 ^
    ChunkRef(first_line=1, last_line=256, byte_start=0, byte_end=..., entries=<valid lines>, cost_tokens=...)

so `store.read_range(key, c.byte_start, c.byte_end)` gives back exactly lines
first_line..last_line, and `split_lines(that, c.first_line)` numbers them again. A chunk spans
up to `chunk_lines` physical lines (blank and invalid ones included, so ranges stay
contiguous); a chunk with no valid line is not emitted.

Invalid lines go to `error_sink` as they are found (the caller appends them to the batch's
errors file), so a file of 50,000 bad lines costs no memory here.

Validation is CPU work (JSON, pydantic, now and then a tokenizer), so it runs in a worker
thread one block of about `BLOCK_BYTES` of whole lines at a time: the event loop keeps serving
other streams while a large file is checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

from bulk.batch_lines import BatchEntry, LineError, LineValidator
from bulk.blob_store import BlobWriter
from config.settings import BulkSpec

BLOCK_BYTES = 1 << 20  # whole lines validated per thread hop
_BLANK = b" \t\r\n\f\v"


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """What one upload may hold (from `BulkSpec`), and how many lines each queued chunk spans."""

    max_bytes: int
    max_lines: int  # non-blank lines, valid or not
    chunk_lines: int

    @classmethod
    def from_spec(cls, spec: BulkSpec) -> IngestLimits:
        return cls(spec.max_file_bytes, spec.max_requests_per_batch, spec.chunk_lines)


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """A run of input lines in the stored file; the queue holds these, not payloads."""

    first_line: int  # 1-based
    last_line: int
    byte_start: int  # offset of first_line in the stored file
    byte_end: int  # offset just after last_line's newline (or the end of the file)
    entries: int  # valid lines in the range
    cost_tokens: int  # sum of the valid entries' cost_tokens
    # Lines in the range refused at upload (already in the errors file): expiry and cancel
    # skip them without validating every line again.
    invalid_lines: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class IngestResult:
    """An accepted file: counts, and the chunks to queue. Invalid lines went to the error sink."""

    bytes: int
    lines: int  # requests: non-blank lines, valid or not
    valid: int
    invalid: int
    cost_tokens: int  # sum over the valid entries
    chunks: tuple[ChunkRef, ...]


class IngestRefused(Exception):
    """The whole file is refused: 400 (not a batch) or 413 (too big); the message says what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def ingest(
    source: AsyncIterator[bytes],
    validator: LineValidator,
    *,
    writer: BlobWriter | None,
    limits: IngestLimits,
    error_sink: Callable[[LineError], Awaitable[None]] | None = None,
) -> IngestResult:
    """Read `source` to its end, validating each line and writing every byte to `writer`.

    `ingest` owns `writer`: it commits it when the file is accepted and aborts it when anything
    fails (IngestRefused, a broken source, cancellation). Pass None to re-validate a file that
    is already stored. Raises IngestRefused when the file is too big (413), holds too many
    requests (413), is not JSONL (400) or has no valid request (400).
    """
    scanner = _LineScanner(validator, limits)
    pending = bytearray()
    searched = 0  # pending[:searched] holds no newline: a long line is not searched again and again
    total = 0
    try:
        async for piece in source:
            total += len(piece)
            if total > limits.max_bytes:
                raise IngestRefused(413, f"the file is larger than the {_size_text(limits.max_bytes)} limit: split it")
            if writer is not None:
                await writer.write(piece)
            pending += piece
            if len(pending) < BLOCK_BYTES:
                continue
            cut = pending.rfind(b"\n", searched) + 1
            if cut:
                block = bytes(pending[:cut])
                del pending[:cut]
                await _report(await asyncio.to_thread(scanner.scan, block, False), error_sink)
            searched = len(pending)
        await _report(await asyncio.to_thread(scanner.scan, bytes(pending), True), error_sink)
        result = scanner.result()
        if writer is not None:
            stored = await writer.commit()
            assert stored == total, f"the blob store kept {stored} of {total} bytes"
    except BaseException:
        if writer is not None:
            await writer.abort()
        raise
    return result


def split_lines(data: bytes, first_line: int) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line without its newline) for each non-blank line of `data`, the bytes
    of a ChunkRef's range, whose first line is `first_line`."""
    # A range ending with a newline splits into one empty piece more: blank, so skipped.
    for index, raw in enumerate(data.split(b"\n")):
        if not _is_blank(raw):
            yield first_line + index, raw


class _LineScanner:
    """Line numbering, validation and chunking across blocks; runs in a worker thread."""

    def __init__(self, validator: LineValidator, limits: IngestLimits) -> None:
        self._validator = validator
        self._limits = limits
        self._next_line = 1
        self._offset = 0  # where the next line starts in the file
        self.lines = self.valid = self.invalid = self.cost_tokens = 0
        self.first_error: LineError | None = None
        self.chunks: list[ChunkRef] = []
        # The chunk being filled: its first line and byte, physical lines, valid entries, cost.
        self._chunk_line = self._chunk_start = self._chunk_size = self._chunk_entries = self._chunk_cost = 0
        self._chunk_invalid: list[int] = []

    def scan(self, block: bytes, final: bool) -> list[LineError]:
        """Validate `block` (whole lines; the last one may lack its newline when `final`);
        returns the block's invalid lines."""
        errors: list[LineError] = []
        lines = block.split(b"\n")
        last = lines.pop()  # after the last newline: empty, or (when final) an unterminated line
        terminated = [(raw, len(raw) + 1) for raw in lines]
        if final and last:
            terminated.append((last, len(last)))
        for raw, size in terminated:
            line_no = self._next_line
            self._next_line += 1
            if self._chunk_size == 0:
                self._chunk_line, self._chunk_start = line_no, self._offset
            self._chunk_size += 1
            self._offset += size
            if not _is_blank(raw):
                self._validate(line_no, raw, errors)
            if self._chunk_size == self._limits.chunk_lines:
                self._close_chunk()
        if final and self._chunk_size:
            self._close_chunk()
        return errors

    def result(self) -> IngestResult:
        if self.lines == 0:
            raise IngestRefused(400, "the file holds no requests: it is empty or only blank lines")
        if self.valid == 0:
            assert self.first_error is not None, "every non-blank line is valid or not"
            error = self.first_error
            raise IngestRefused(
                400,
                f"no valid request in the file ({self.invalid} invalid lines); line {error.line}: {error.message}",
            )
        return IngestResult(self._offset, self.lines, self.valid, self.invalid, self.cost_tokens, tuple(self.chunks))

    def _validate(self, line_no: int, raw: bytes, errors: list[LineError]) -> None:
        if self.lines == 0:
            _check_jsonl(line_no, raw)
        self.lines += 1
        if self.lines > self._limits.max_lines:
            limit = self._limits.max_lines
            raise IngestRefused(413, f"the file holds more than {limit} requests: at most {limit} requests per batch")
        outcome = self._validator.validate(line_no, raw)
        if isinstance(outcome, BatchEntry):
            self.valid += 1
            self.cost_tokens += outcome.cost_tokens
            self._chunk_entries += 1
            self._chunk_cost += outcome.cost_tokens
        else:
            self.invalid += 1
            self._chunk_invalid.append(line_no)
            if self.first_error is None:
                self.first_error = outcome
            errors.append(outcome)

    def _close_chunk(self) -> None:
        if self._chunk_entries:
            last_line = self._chunk_line + self._chunk_size - 1
            chunk = ChunkRef(
                self._chunk_line,
                last_line,
                self._chunk_start,
                self._offset,
                self._chunk_entries,
                self._chunk_cost,
                tuple(self._chunk_invalid),
            )
            self.chunks.append(chunk)
        self._chunk_size = self._chunk_entries = self._chunk_cost = 0
        self._chunk_invalid = []


def _check_jsonl(line_no: int, raw: bytes) -> None:
    """Refuse a file that is not JSONL at all (JSON array, CSV, gzip, UTF-16, ...) on its first
    request line, with one message instead of an error for every line."""
    text = raw.removeprefix(b"\xef\xbb\xbf").lstrip(_BLANK)
    if b"\0" in raw:
        raise IngestRefused(
            400, f"the file is not JSONL: line {line_no} holds NUL bytes (binary data, or UTF-16 text); send UTF-8 text"
        )
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        raise IngestRefused(400, f"the file is not JSONL: line {line_no} is not UTF-8 text") from None
    if not text.startswith(b"{"):
        raise IngestRefused(
            400,
            f"the file is not JSONL: line {line_no} does not start with '{{'; write one JSON request object per line",
        )


async def _report(errors: list[LineError], sink: Callable[[LineError], Awaitable[None]] | None) -> None:
    if sink is not None:
        for error in errors:
            await sink(error)


def _is_blank(raw: bytes) -> bool:
    # Most lines start with '{': decide on the first byte, strip only when it is whitespace.
    return not raw or (raw[0] in _BLANK and not raw.strip(_BLANK))


def _size_text(size: int) -> str:
    mib = 1 << 20
    return f"{size / mib:g} MB" if size >= mib else f"{size} bytes"
