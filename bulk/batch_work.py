"""What one dispatcher holds of one batch, between Redis and the gateway.

    chunk (from the queue) ──load_chunk──▶ ready entries ──release──▶ in flight
                                                  ▲                      │
                                    retry/later ──┘                      ▼
                          chunk acknowledged ◀── marked ◀── written ◀── results

A chunk is acknowledged only when every entry in it has a marked result, so a dispatcher that
dies loses nothing: its chunks go to another, which skips what is marked.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from bulk.batch_lines import BatchEntry, LineValidator
from bulk.batch_store import BatchRecord
from bulk.chunk_queue import QueuedChunk
from bulk.ingest import split_lines
from bulk.release_policy import CompletionRate
from bulk.results import EntryResult, Outcome


@dataclass(slots=True)
class ReadyEntry:
    entry: BatchEntry
    attempt: int = 0  # server failures so far


@dataclass(slots=True)
class HeldChunk:
    queued: QueuedChunk
    outstanding: set[int]  # lines without a marked result yet


@dataclass(slots=True)
class BatchWork:
    """A batch's entries ready to go, in flight, and ended but not yet written."""

    record: BatchRecord
    validator: LineValidator
    ready: deque[ReadyEntry] = field(default_factory=deque)
    chunks: dict[str, HeldChunk] = field(default_factory=dict)
    inflight: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    inflight_costs: dict[int, int] = field(default_factory=dict)  # line -> cost_tokens
    results: list[EntryResult] = field(default_factory=list)
    queue_empty: bool = False  # the last read found no new chunk
    sweep: Outcome | None = None  # EXPIRED past the deadline, FAILED once cancelled: entries left are swept
    rate: CompletionRate = field(default_factory=CompletionRate)
    _chunk_of_line: dict[int, str] = field(default_factory=dict, init=False)

    @property
    def batch_id(self) -> str:
        return self.record.batch_id

    def load_chunk(self, queued: QueuedChunk, raw: bytes, marked: set[int]) -> bool:
        """Queue the chunk's valid, unmarked entries; False when it has none (acknowledge it)."""
        outstanding: set[int] = set()
        for line, text in split_lines(raw, queued.chunk.first_line):
            if line in marked or line in self._chunk_of_line:
                continue
            entry = self.validator.validate(line, text)
            if isinstance(entry, BatchEntry):  # refused lines are already in the errors file
                self.ready.append(ReadyEntry(entry))
                outstanding.add(line)
                self._chunk_of_line[line] = queued.message_id
        if not outstanding:
            return False
        self.chunks[queued.message_id] = HeldChunk(queued, outstanding)
        return True

    def head_cost(self) -> int | None:
        return self.ready[0].entry.cost_tokens if self.ready else None

    def settle(self, marked: Iterable[int]) -> list[str]:
        """Forget lines that now have a marked result; the chunks that became complete."""
        complete: list[str] = []
        for line in marked:
            message_id = self._chunk_of_line.pop(line, None)
            if message_id is None or message_id not in self.chunks:
                continue
            held = self.chunks[message_id]
            held.outstanding.discard(line)
            if not held.outstanding:
                del self.chunks[message_id]
                complete.append(message_id)
        return complete

    def held_message_ids(self) -> list[str]:
        return list(self.chunks)
