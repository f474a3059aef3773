"""One upload to the Files API, staged: nothing is kept until the whole form has been checked.

    begin      the team's storage quota: Content-Length reserved       (413 before any body is read)
    receive    bytes ──▶ a hidden blob writer, metered against the quota and the size limit;
               the file must look like JSONL (its first non-blank byte is '{')
    commit     the blob appears, the record is created (taking the reservation over), expiry scheduled
    abort      (any refusal: a bad field sent after the file, over quota, not JSONL, a cut body)
               the temp file is removed and the reservation given back: no blob, no record

Used as `async with intake.begin_file(...) as upload:`; leaving the block without `commit`
aborts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import TracebackType

from bulk.blob_store import BlobStore
from bulk.file_store import FileRecord, FileStore, new_file_id, uploaded_file_key
from bulk.ingest import IngestRefused
from bulk.storage_quota import Reservation

_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n\f\v"


class StagedUpload:
    """An upload streamed into the blob store and reserved in its team's storage, kept only on
    `commit`."""

    def __init__(
        self,
        files: FileStore,
        blobs: BlobStore,
        reservation: Reservation,
        *,
        max_bytes: int,
        clock: Callable[[], float],
    ) -> None:
        self.file_id = new_file_id()
        self.blob_key = uploaded_file_key(self.file_id)
        self.size = 0
        self._files = files
        self._blobs = blobs
        self._reservation = reservation
        self._writer = blobs.open_writer(self.blob_key)
        self._max_bytes = max_bytes
        self._clock = clock
        self._head = _JsonlHead()
        self._finished = False

    async def __aenter__(self) -> StagedUpload:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if not self._finished:
            await self.abort()

    async def receive(self, source: AsyncIterator[bytes]) -> None:
        """Stream the file's bytes in; raises IngestRefused (413 too big or over quota, 400 not JSONL)."""
        async for piece in self._reservation.metered(source):
            self.size += len(piece)
            if self.size > self._max_bytes:
                raise IngestRefused(413, f"the file is larger than the {self._max_bytes // 2**20} MB limit: split it")
            self._head.feed(piece)
            await self._writer.write(piece)
        self._head.check()

    async def commit(self, purpose: str, filename: str, ttl_s: int) -> FileRecord:
        """Keep the file: it expires `ttl_s` after now, its creation time."""
        self._finished = True
        now = self._clock()
        try:
            await self._writer.commit()
            record = await self._files.create(
                self._reservation.team_id, purpose, filename, self.size, self.blob_key,
                file_id=self.file_id, now=now, expires_at=now + ttl_s, reserved=self._reservation.reserved,
            )  # fmt: skip
        except BaseException:
            await self._blobs.delete(self.blob_key)
            await self._reservation.release()
            raise
        self._reservation.reserved = 0  # the record holds the bytes now
        return record

    async def abort(self) -> None:
        """Refused: no blob, no record, the reservation back."""
        self._finished = True
        await self._writer.abort()
        await self._reservation.release()


class _JsonlHead:
    """Whether a file starts like JSONL: its first non-blank byte (after a UTF-8 BOM) is '{'.
    A file of UTF-16, CSV, a JSON array or nothing at all is refused at upload, not at batch time."""

    def __init__(self) -> None:
        self._start = b""  # the file's first bytes, while they may still be a BOM
        self._past_bom = False
        self.first: bytes | None = None

    def feed(self, piece: bytes) -> None:
        if self.first is not None or not piece:
            return
        if not self._past_bom:
            self._start += piece
            if len(self._start) < len(_BOM) and _BOM.startswith(self._start):
                return
            piece, self._start, self._past_bom = self._start.removeprefix(_BOM), b"", True
        rest = piece.lstrip(_BLANK)
        if rest:
            self.first = rest[:1]

    def check(self) -> None:
        if self.first is None:
            raise IngestRefused(400, "the file holds no requests: it is empty or only blank lines")
        if self.first != b"{":
            raise IngestRefused(
                400, "the file is not JSONL: its first line does not start with '{'; write one JSON request per line"
            )
