"""BatchWork: a chunk's valid, unmarked lines become ready entries; a chunk is complete (to be
acknowledged) only when every line it holds has a marked result."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bulk.batch_lines import BatchEntry, LineValidator
from bulk.batch_store import BatchRecord, BatchStatus
from bulk.batch_work import BatchWork
from bulk.chunk_queue import QueuedChunk
from bulk.ingest import ChunkRef
from contracts.catalog import ServedModel

MAX_TOKENS = 10


@pytest.fixture(scope="module")
def validator() -> LineValidator:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["the quick brown fox", "jumps over the lazy dog"], trainers.BpeTrainer())
    return LineValidator(ServedModel("m", 512, tokenizer), "native")


@pytest.fixture
def work(validator: LineValidator) -> BatchWork:
    record = BatchRecord(
        batch_id="batch_w1",
        team_id="alpha",
        model_id="m",
        line_format="native",
        endpoint="/v1/generate",
        input_key="batches/batch_w1/input.jsonl",
        input_file_id=None,
        filename="in.jsonl",
        status=BatchStatus.IN_PROGRESS,
        created_at=1.0,
        deadline=1000.0,
        total=20,
    )
    return BatchWork(record, validator)


def _ok(line: int) -> bytes:
    return json.dumps({"custom_id": f"q{line}", "prompt": "x" * line, "max_tokens": MAX_TOKENS}).encode()


def _entry(line: int) -> BatchEntry:
    body = {"model": "m", "prompt": "x" * line, "max_tokens": MAX_TOKENS}
    return BatchEntry(line, f"q{line}", "/v1/generate", body, line + 2 + MAX_TOKENS)


def _chunk(message_id: str, first_line: int, lines: list[bytes]) -> tuple[QueuedChunk, bytes]:
    """A queued chunk over `lines` (its bytes, as read from the input file) starting at `first_line`."""
    raw = b"".join(line + b"\n" for line in lines)
    ref = ChunkRef(first_line, first_line + len(lines) - 1, 0, len(raw), len(lines), 0)
    return QueuedChunk("batch_w1", message_id, ref), raw


def _ready_lines(work: BatchWork) -> list[int]:
    return [ready.entry.line for ready in work.ready]


def test_load_chunk_queues_valid_unmarked_lines(work: BatchWork) -> None:
    # Lines 5-10: valid, invalid JSON, blank, valid (marked already), refused request, valid.
    queued, raw = _chunk("1-0", 5, [_ok(5), b"{oops", b"", _ok(8), b'{"prompt": "no max"}', _ok(10)])
    assert work.load_chunk(queued, raw, marked={8}) is True
    assert [ready.entry for ready in work.ready] == [_entry(5), _entry(10)]
    assert [ready.attempt for ready in work.ready] == [0, 0]
    assert work.chunks["1-0"].outstanding == {5, 10}
    assert work.chunks["1-0"].queued is queued
    assert work.held_message_ids() == ["1-0"]
    assert work.head_cost() == 5 + 2 + MAX_TOKENS


def test_chunk_with_nothing_left_is_not_held(work: BatchWork) -> None:
    queued, raw = _chunk("1-0", 1, [_ok(1), b"{oops", _ok(3)])
    assert work.load_chunk(queued, raw, marked={1, 3}) is False
    only_invalid, raw_invalid = _chunk("2-0", 4, [b"{oops", b"  ", b"[1]"])
    assert work.load_chunk(only_invalid, raw_invalid, marked=set()) is False
    assert (list(work.ready), work.chunks, work.held_message_ids()) == ([], {}, [])
    assert work.head_cost() is None
    assert work.settle([1, 3]) == []  # lines it never held


def test_lines_already_held_are_not_queued_twice(work: BatchWork) -> None:
    queued, raw = _chunk("1-0", 1, [_ok(1), _ok(2)])
    assert work.load_chunk(queued, raw, marked=set()) is True
    again, raw_again = _chunk("1-0", 1, [_ok(1), _ok(2)])  # delivered again (reclaimed by itself)
    assert work.load_chunk(again, raw_again, marked=set()) is False
    assert _ready_lines(work) == [1, 2]
    assert work.chunks["1-0"].outstanding == {1, 2}


def test_settle_completes_a_chunk_only_when_all_its_lines_are_marked(work: BatchWork) -> None:
    first, raw_first = _chunk("1-0", 1, [_ok(1), _ok(2), _ok(3)])
    second, raw_second = _chunk("2-0", 4, [_ok(4), _ok(5)])
    assert work.load_chunk(first, raw_first, marked=set())
    assert work.load_chunk(second, raw_second, marked={5})
    assert work.settle([1, 3]) == []
    assert work.chunks["1-0"].outstanding == {2}
    assert work.settle([4, 2]) == ["2-0", "1-0"]  # in the order they became complete
    assert (work.chunks, work.held_message_ids()) == ({}, [])
    assert work.settle([1, 2, 4]) == []  # already settled: not reported twice


def test_settle_ignores_lines_of_other_chunks_and_unknown_lines(work: BatchWork) -> None:
    queued, raw = _chunk("1-0", 1, [_ok(1), _ok(2)])
    work.load_chunk(queued, raw, marked=set())
    assert work.settle([7, 8, 1]) == []
    assert work.settle([2]) == ["1-0"]
