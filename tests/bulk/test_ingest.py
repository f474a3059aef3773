"""Ingestion: exact chunk references (reread through the store), errors streamed to the sink,
the same result whatever the piece and block sizes, and whole-file refusals that abort the write."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import bulk.ingest as ingest_module
from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from bulk.batch_lines import BatchEntry, LineError, LineValidator
from bulk.blob_store import LocalBlobStore
from bulk.ingest import ChunkRef, IngestLimits, IngestRefused, IngestResult, ingest, split_lines
from contracts.catalog import ServedModel

KEY = "batches/b1/input.jsonl"
LIMITS = IngestLimits(max_bytes=1 << 20, max_lines=100, chunk_lines=4)


@pytest.fixture(scope="module")
def validator() -> LineValidator:
    return LineValidator(ServedModel("m", 512, train_tokenizer(generate_corpus(5, 300), 300)), "native")


def _ok(prompt: str, max_tokens: int = 10) -> bytes:
    return json.dumps({"custom_id": prompt, "prompt": prompt, "max_tokens": max_tokens}).encode()


def _cost(prompt: str, max_tokens: int = 10) -> int:
    return len(prompt.encode()) + 2 + max_tokens


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


class Sink:
    def __init__(self) -> None:
        self.errors: list[LineError] = []

    async def __call__(self, error: LineError) -> None:
        self.errors.append(error)


# Lines 1-10: blank (3), invalid (5: JSON, 9: request), CRLF-terminated valid line (6).
LINES = [
    _ok("a"),
    _ok("bb"),
    b"",
    _ok("ccc"),
    b"{oops",
    _ok("d") + b"\r",
    _ok("e"),
    b"  \t",
    b'{"prompt": "f"}',
    _ok("g"),
]
DATA = b"\n".join(LINES) + b"\n"


def _offset(line: int) -> int:
    """Where 1-based `line` starts in DATA."""
    return sum(len(raw) + 1 for raw in LINES[: line - 1])


EXPECTED_CHUNKS = (
    ChunkRef(1, 4, 0, _offset(5), 3, _cost("a") + _cost("bb") + _cost("ccc")),
    ChunkRef(5, 8, _offset(5), _offset(9), 2, _cost("d") + _cost("e"), invalid_lines=(5,)),
    ChunkRef(9, 10, _offset(9), len(DATA), 1, _cost("g"), invalid_lines=(9,)),
)


async def test_chunks_errors_and_the_stored_file_are_exact(tmp_path: Path, validator: LineValidator) -> None:
    store, sink = LocalBlobStore(tmp_path), Sink()
    result = await ingest(_pieces(DATA, 7), validator, writer=store.open_writer(KEY), limits=LIMITS, error_sink=sink)
    assert result == IngestResult(
        bytes=len(DATA),
        lines=8,
        valid=6,
        invalid=2,
        cost_tokens=sum(c.cost_tokens for c in EXPECTED_CHUNKS),
        chunks=EXPECTED_CHUNKS,
    )
    assert [(e.line, e.custom_id, e.code) for e in sink.errors] == [
        (5, None, "invalid_json"),
        (9, None, "invalid_request"),
    ]
    assert "max_tokens is required" in sink.errors[1].message
    assert await store.size(KEY) == len(DATA)
    # Each chunk's range holds exactly its lines, numbered as in the file.
    reread: list[tuple[int, bytes]] = []
    for chunk in result.chunks:
        reread += split_lines(await store.read_range(KEY, chunk.byte_start, chunk.byte_end), chunk.first_line)
    assert reread == [(n, LINES[n - 1]) for n in (1, 2, 4, 5, 6, 7, 9, 10)]
    entries = [validator.validate(n, raw) for n, raw in reread]
    assert [e.custom_id for e in entries if isinstance(e, BatchEntry)] == ["a", "bb", "ccc", "d", "e", "g"]


@pytest.mark.parametrize(("piece", "block"), [(1, 1), (5, 40), (64 * 1024, 30), (64 * 1024, 1 << 20)])
async def test_the_result_does_not_depend_on_piece_or_block_size(
    validator: LineValidator, monkeypatch: pytest.MonkeyPatch, piece: int, block: int
) -> None:
    monkeypatch.setattr(ingest_module, "BLOCK_BYTES", block)
    sink = Sink()
    result = await ingest(_pieces(DATA, piece), validator, writer=None, limits=LIMITS, error_sink=sink)
    assert result.chunks == EXPECTED_CHUNKS
    assert [e.line for e in sink.errors] == [5, 9]


async def test_a_last_line_without_newline_ends_at_the_end_of_the_file(validator: LineValidator) -> None:
    data = _ok("a") + b"\n" + _ok("b")
    result = await ingest(_pieces(data, 3), validator, writer=None, limits=LIMITS)
    assert result.chunks == (ChunkRef(1, 2, 0, len(data), 2, _cost("a") + _cost("b")),)


async def test_a_chunk_without_valid_lines_is_not_queued(validator: LineValidator) -> None:
    lines = [b"{bad"] * 4 + [_ok("x")]
    data = b"\n".join(lines)
    result = await ingest(_pieces(data, 100), validator, writer=None, limits=LIMITS)
    start = 5 * len(b"{bad\n")
    assert result.chunks == (ChunkRef(5, 5, start - 5, len(data), 1, _cost("x")),)
    assert (result.valid, result.invalid) == (1, 4)


async def test_revalidating_a_stored_file_gives_the_same_result(tmp_path: Path, validator: LineValidator) -> None:
    store = LocalBlobStore(tmp_path)
    first = await ingest(_pieces(DATA, 1000), validator, writer=store.open_writer(KEY), limits=LIMITS)
    again = await ingest(store.read(KEY, chunk_bytes=10), validator, writer=None, limits=LIMITS)
    assert again == first


def test_split_lines_numbers_and_skips_blanks() -> None:
    assert list(split_lines(b"a\n\n \r\nb\r\nc", 41)) == [(41, b"a"), (44, b"b\r"), (45, b"c")]
    assert list(split_lines(b"a\n", 1)) == [(1, b"a")]
    assert list(split_lines(b"", 1)) == []


async def _refused(
    tmp_path: Path, validator: LineValidator, data: bytes, limits: IngestLimits = LIMITS
) -> IngestRefused:
    store = LocalBlobStore(tmp_path)
    with pytest.raises(IngestRefused) as caught:
        await ingest(_pieces(data, 16), validator, writer=store.open_writer(KEY), limits=limits)
    assert await store.size(KEY) is None  # aborted: nothing stored
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    return caught.value


async def test_too_big_is_413_with_the_limit(tmp_path: Path, validator: LineValidator) -> None:
    refused = await _refused(tmp_path, validator, DATA, IngestLimits(100, 100, 4))
    assert (refused.status, refused.message) == (413, "the file is larger than the 100 bytes limit: split it")
    limits = IngestLimits(2 << 20, 10**6, 256)
    big = _ok("x" * 1000) + b"\n"
    refused = await _refused(tmp_path, validator, big * ((2 << 20) // len(big) + 1), limits)
    assert "larger than the 2 MB limit" in refused.message


async def test_too_many_requests_is_413(tmp_path: Path, validator: LineValidator) -> None:
    refused = await _refused(tmp_path, validator, DATA, IngestLimits(1 << 20, 7, 4))
    assert refused.status == 413
    assert refused.message == "the file holds more than 7 requests: at most 7 requests per batch"
    # Exactly the limit (8 non-blank lines; blank ones do not count) is fine.
    assert (await ingest(_pieces(DATA, 16), validator, writer=None, limits=IngestLimits(1 << 20, 8, 4))).lines == 8


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the file holds no requests: it is empty or only blank lines"),
        (b"\n \n\r\n", "the file holds no requests"),
        (
            b'{"prompt": "p"}\n{"x": 1}\n',
            "no valid request in the file (2 invalid lines); line 1: max_tokens is required",
        ),
        (b'\n[{"prompt": "p", "max_tokens": 1}]\n', "the file is not JSONL: line 2 does not start with '{'"),
        (b"prompt,max_tokens\nhi,5\n", "the file is not JSONL: line 1 does not start with '{'"),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "the file is not JSONL: line 1 holds NUL bytes (binary data"),
        ('{"prompt": "p"}\n'.encode("utf-16"), "the file is not JSONL: line 1 holds NUL bytes (binary data, or UTF-16"),
        (b'{"prompt": "\xe9t\xe9"}\n', "the file is not JSONL: line 1 is not UTF-8 text"),
    ],
)
async def test_files_that_are_not_batches_are_400(
    tmp_path: Path, validator: LineValidator, data: bytes, message: str
) -> None:
    refused = await _refused(tmp_path, validator, data)
    assert refused.status == 400
    assert refused.message.startswith(message)


async def test_a_byte_order_mark_does_not_make_a_file_binary(validator: LineValidator) -> None:
    result = await ingest(_pieces(b"\xef\xbb\xbf" + DATA, 16), validator, writer=None, limits=LIMITS)
    assert result.valid == 6 and result.chunks[0].byte_end == _offset(5) + 3


async def test_a_failing_source_aborts_the_writer(tmp_path: Path, validator: LineValidator) -> None:
    store = LocalBlobStore(tmp_path)

    async def broken() -> AsyncIterator[bytes]:
        yield DATA
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await ingest(broken(), validator, writer=store.open_writer(KEY), limits=LIMITS)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
