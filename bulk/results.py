"""Each entry's result, recorded exactly once, however often it ran and whoever ran it.

A dispatcher collects results for a second or so, then:

    1. writes them as one immutable segment   blob  batches/{id}/segments/{name}.jsonl
       (lines "LINE<TAB>OUTCOME<TAB>JSON"; S3 has no append, so segments are never changed)
    2. marks them in one Lua script           sy:batch:{id}:marks     hash  line -> segment
                                              sy:batch:{id}:segments  list  segments that hold marks
       HSETNX: the first segment to mark a line owns it; its outcome's count goes up once.
       In sentinel mode the mark waits for a replica (config/replica_acks.py): one a failover
       could drop is not acknowledged, and the results are written again.

A dispatcher that dies before 2 leaves an unlisted segment nobody reads; its entries were not
marked, so whoever reclaims their chunk runs them again. Two dispatchers that both ran an entry
(a slow one reclaimed as dead) both write it; only the marked copy is read. Readers stream
the listed segments and keep each line whose mark names that segment. When every entry has
ended the batch is compacted into two files (results, errors: OpenAI's output and error
files) and the segments go.
"""

from __future__ import annotations

import enum
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bulk.batch_store import batch_key
from bulk.blob_store import BlobStore, BlobWriter
from config.replica_acks import ReplicaAcks


class Outcome(str, enum.Enum):
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class EntryResult:
    """One entry's end: its output line (OpenAI batch output format) and which file it goes to."""

    line: int
    outcome: Outcome
    record: dict[str, Any]


def output_record(
    batch_id: str,
    line: int,
    custom_id: str | None,
    *,
    response: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A line of the results or errors file: `response` {status_code, request_id, body} or
    `error` {code, message}. `line` is the input line, for files without custom ids."""
    return {
        "id": f"batch_req_{batch_id.removeprefix('batch_')}_{line}",
        "custom_id": custom_id,
        "line": line,
        "response": response,
        "error": error,
    }


def input_key(batch_id: str) -> str:
    return f"batches/{batch_id}/input.jsonl"


def invalid_key(batch_id: str) -> str:
    """Lines refused at upload, in the errors file's format."""
    return f"batches/{batch_id}/invalid.jsonl"


def results_key(batch_id: str) -> str:
    return f"batches/{batch_id}/results.jsonl"


def errors_key(batch_id: str) -> str:
    return f"batches/{batch_id}/errors.jsonl"


def _marks_key(batch_id: str) -> str:
    return f"sy:batch:{batch_id}:marks"


def _segments_key(batch_id: str) -> str:
    return f"sy:batch:{batch_id}:segments"


def _segment_blob(batch_id: str, segment: str) -> str:
    return f"batches/{batch_id}/segments/{segment}.jsonl"


# KEYS[1] marks  KEYS[2] batch  KEYS[3] segments  ARGV[1] segment  ARGV[2] now  ARGV[3..] line, outcome pairs
# Returns {finalizing (0/1), newly marked lines...}. With no pairs it only checks whether the
# batch has ended (after a cancellation, say).
_MARK = """
local new = {}
for i = 3, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[1]) == 1 then
    redis.call('HINCRBY', KEYS[2], ARGV[i + 1], 1)
    new[#new + 1] = ARGV[i]
  end
end
if #new > 0 then redis.call('RPUSH', KEYS[3], ARGV[1]) end
local b = redis.call('HMGET', KEYS[2], 'total', 'done', 'failed', 'expired', 'status')
local finalizing = 0
if b[1] and tonumber(b[2]) + tonumber(b[3]) + tonumber(b[4]) >= tonumber(b[1])
   and (b[5] == 'in_progress' or b[5] == 'cancelling') then
  redis.call('HSET', KEYS[2], 'status', 'finalizing')
  redis.call('HSETNX', KEYS[2], 'finalizing_at', ARGV[2])
  finalizing = 1
end
new[#new + 1] = finalizing
return new
"""


@dataclass(frozen=True, slots=True)
class Marked:
    """What one write recorded: the lines it owns now, and whether the batch has just ended."""

    lines: frozenset[int]
    finalizing: bool


class ResultStore:
    """Writes, marks, reads and compacts a batch's results."""

    def __init__(self, client: aioredis.Redis, blobs: BlobStore, acks: ReplicaAcks | None = None) -> None:
        self._redis = client
        self._blobs = blobs
        self._mark = client.register_script(_MARK)
        # In sentinel mode a mark counts once a replica holds it: the dispatcher acknowledges a
        # chunk when every line of it is marked, and a mark a failover dropped would leave its
        # line never run (the partition run: entries with no end, batches never finished).
        self._acks = acks if acks is not None else ReplicaAcks(0, 1)

    async def write(self, batch_id: str, segment: str, results: Sequence[EntryResult], now: float) -> Marked:
        """Store `results` as segment `segment` (a name unique to this writer), then mark them."""
        if results:
            data = "".join(f"{r.line}\t{r.outcome.value}\t{json.dumps(r.record)}\n" for r in results)
            await self._blobs.put(_segment_blob(batch_id, segment), data.encode())
        pairs = [value for r in results for value in (r.line, r.outcome.value)]
        keys = [_marks_key(batch_id), batch_key(batch_id), _segments_key(batch_id)]
        reply: list[Any] = await self._acks.run(self._redis, self._mark, keys, [segment, now, *pairs])
        return Marked(frozenset(int(line) for line in reply[:-1]), bool(int(reply[-1])))

    async def settle(self, batch_id: str, now: float) -> bool:
        """Whether the batch has just ended (nothing pending): it is then `finalizing`."""
        return (await self.write(batch_id, "settle", (), now)).finalizing

    async def marked(self, batch_id: str, lines: Sequence[int]) -> set[int]:
        """Which of `lines` already have a result."""
        if not lines:
            return set()
        owners = await self._redis.hmget(_marks_key(batch_id), [str(line) for line in lines])
        return {line for line, owner in zip(lines, owners, strict=True) if owner is not None}

    async def read(self, batch_id: str, outcomes: frozenset[Outcome]) -> AsyncIterator[bytes]:
        """Marked results so far with these outcomes, one JSON line each (unordered)."""
        async for kept in self._marked_records(batch_id):
            lines = [record + b"\n" for outcome, record in kept if outcome in outcomes]
            if lines:
                yield b"".join(lines)

    async def compact(self, batch_id: str, results: BlobWriter, errors: BlobWriter) -> tuple[int, int]:
        """Write the final results and errors files (upload refusals first in errors) in one
        pass over the segments; returns their sizes. Idempotent: run again after a crash, it
        writes the same files."""
        try:
            if await self._blobs.size(invalid_key(batch_id)) is not None:
                async for block in self._blobs.read(invalid_key(batch_id)):
                    await errors.write(block)
            async for kept in self._marked_records(batch_id):
                done = [record + b"\n" for outcome, record in kept if outcome is Outcome.DONE]
                ended = [record + b"\n" for outcome, record in kept if outcome is not Outcome.DONE]
                if done:
                    await results.write(b"".join(done))
                if ended:
                    await errors.write(b"".join(ended))
        except BaseException:
            await results.abort()
            await errors.abort()
            raise
        return await results.commit(), await errors.commit()

    async def _marked_records(self, batch_id: str) -> AsyncIterator[list[tuple[Outcome, bytes]]]:
        """The records whose mark names the segment they are in, a block of lines at a time."""
        owners = {int(k): _text(v) for k, v in (await self._redis.hgetall(_marks_key(batch_id))).items()}
        segments = dict.fromkeys(_text(s) for s in await self._redis.lrange(_segments_key(batch_id), 0, -1))
        for segment in segments:
            pending = b""
            async for block in self._blobs.read(_segment_blob(batch_id, segment)):
                *lines, pending = (pending + block).split(b"\n")
                kept = [rest for line, rest in map(_split, lines) if owners.get(line) == segment]
                if kept:
                    yield kept

    async def drop_segments(self, batch_id: str) -> None:
        """After compaction: the marks and segments are no longer read."""
        await self._redis.delete(_marks_key(batch_id), _segments_key(batch_id))
        await self._blobs.delete_prefix(f"batches/{batch_id}/segments")


def _split(line: bytes) -> tuple[int, tuple[Outcome, bytes]]:
    number, outcome, record = line.split(b"\t", 2)
    return int(number), (Outcome(outcome.decode()), record)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
