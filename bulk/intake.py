"""From an upload to a queued batch (the gateway's side of bulk).

native    POST /v1/batches (multipart: file, model, deadline)
             file ──stream──▶ ingest ──▶ blob batches/{id}/input.jsonl
OpenAI    POST /v1/files (purpose=batch) ──▶ blob files/{file_id}
          POST /v1/batches {input_file_id, endpoint}
             blob files/{file_id} ──stream──▶ ingest (validation only; the file stays put)

then      refused lines ──▶ blob batches/{id}/invalid.jsonl (the start of the errors file)
          chunk references ──▶ the batch's queue; the record ──▶ in_progress, active

Every stored upload counts in its team's storage quota, reserved as it streams in
(`bulk.storage_quota`), and expires (`bulk.retention`). A file a batch reads is registered as
used by it first, so deleting or expiring the file keeps its bytes until the batch ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import redis.asyncio as aioredis

from bulk.batch_lines import GENERATE_ENDPOINT, LineError, LineValidator
from bulk.batch_store import BatchRecord, BatchStatus, BatchStore, new_batch_id
from bulk.blob_store import BlobNotFound, BlobStore
from bulk.chunk_queue import ChunkQueue
from bulk.file_store import FileRecord, FileStore
from bulk.file_upload import StagedUpload
from bulk.ingest import IngestLimits, IngestRefused, ingest
from bulk.results import Outcome, ResultStore, input_key, invalid_key, output_record
from bulk.retention import Retention, RetentionPolicy
from bulk.storage_quota import Reservation, StorageQuota
from config.settings import SwitchyardConfig
from contracts.caller_echo import echoed
from contracts.catalog import ModelCatalog
from contracts.openai_wire.chat_template import ChatMessage, ChatTemplates
from contracts.openai_wire.tool_calls import ToolSpec


def make_validator(
    catalog: ModelCatalog, templates: ChatTemplates, model_id: str, line_format: str, endpoint: str
) -> LineValidator:
    """The validator of one batch's lines: the same at upload and when the dispatcher re-reads them."""
    model = catalog.get(model_id)
    if model is None:
        raise LookupError(f"model {echoed(model_id)} is not configured")

    def render(messages: list[ChatMessage], tools: list[ToolSpec]) -> str:
        return templates.render(model, messages, tools)

    fmt: Literal["native", "openai"] = "native" if line_format == "native" else "openai"
    return LineValidator(model, fmt, None if fmt == "native" else endpoint, render)


class BatchIntake:
    """Stores uploads and creates batches; raises IngestRefused (400/413) for files it refuses."""

    def __init__(
        self,
        config: SwitchyardConfig,
        client: aioredis.Redis,
        blobs: BlobStore,
        catalog: ModelCatalog,
        templates: ChatTemplates,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._limits = IngestLimits.from_spec(config.bulk)
        self.max_deadline_s = config.bulk.max_deadline_s
        self._max_bytes = config.bulk.max_file_bytes
        self._blobs = blobs
        self._catalog = catalog
        self._templates = templates
        self._clock = clock
        self.blobs = blobs
        self.batches = BatchStore(client)
        self.files = FileStore(client)
        self.results = ResultStore(client, blobs)
        self._queue = ChunkQueue(client, consumer="intake")
        self.quota = StorageQuota(config, client)
        self.retention = Retention(
            client, blobs, self.files, self.batches, RetentionPolicy.from_spec(config.bulk), clock=clock
        )

    async def begin_file(self, team_id: str, content_length: int | None = None) -> StagedUpload:
        """An upload to the Files API, kept only when committed. Reserves `content_length` (the
        request's, an upper bound of the file's) first: StorageQuotaExceeded before any body."""
        reservation = self.quota.reservation(team_id)
        if content_length is not None:
            await reservation.reserve(content_length)
        return StagedUpload(self.files, self._blobs, reservation, max_bytes=self._max_bytes, clock=self._clock)

    async def store_file(self, team_id: str, purpose: str, filename: str, source: AsyncIterator[bytes]) -> FileRecord:
        """Keep an upload as it is (OpenAI's Files API); its lines are validated when a batch uses it."""
        async with await self.begin_file(team_id) as upload:
            await upload.receive(source)
            return await upload.commit(purpose, filename, self.retention.policy.file_ttl_s)

    async def discard_file(self, record: FileRecord) -> None:
        """A file stored for a request that was then refused: it goes, bytes and record."""
        await self.retention.delete_file(record, self._clock())

    async def from_upload(
        self,
        team_id: str,
        model_id: str,
        source: AsyncIterator[bytes],
        *,
        filename: str,
        deadline: float,
        metadata: dict[str, str] | None = None,
        completion_window: str | None = None,
    ) -> BatchRecord:
        """A native batch: the file streams into the blob store as it is validated."""
        batch_id = new_batch_id()
        reservation = self.quota.reservation(team_id)
        try:
            return await self._create(
                batch_id, team_id, model_id, "native", GENERATE_ENDPOINT, reservation.metered(source),
                store_as=input_key(batch_id), input_file_id=None, filename=filename, deadline=deadline,
                metadata=metadata or {}, completion_window=completion_window, reservation=reservation,
            )  # fmt: skip
        except BaseException:
            await reservation.release()
            raise

    async def from_file(
        self,
        team_id: str,
        model_id: str,
        file: FileRecord,
        endpoint: str,
        *,
        deadline: float,
        line_format: str = "openai",
        metadata: dict[str, str] | None = None,
        completion_window: str | None = None,
        output_ttl_s: int | None = None,
    ) -> BatchRecord:
        """A batch over an uploaded file: validated from the blob store, read in place. The batch
        is registered as the file's user before the first read, so a delete or expiry that
        comes meanwhile keeps the bytes."""
        batch_id = new_batch_id()
        await self.files.add_user(file.file_id, batch_id, deadline)
        try:
            if await self.files.get(file.file_id) is None:  # deleted before it was registered
                raise IngestRefused(404, f"file {file.file_id!r} was deleted")
            return await self._create(
                batch_id, team_id, model_id, line_format, endpoint, self._blobs.read(file.blob_key),
                store_as=None, input_file_id=file.file_id, filename=file.filename, deadline=deadline,
                metadata=metadata or {}, stored_key=file.blob_key, completion_window=completion_window,
                output_ttl_s=output_ttl_s,
            )  # fmt: skip
        except BaseException:
            await self.files.remove_user(file.file_id, batch_id)
            raise

    async def _create(
        self,
        batch_id: str,
        team_id: str,
        model_id: str,
        line_format: str,
        endpoint: str,
        source: AsyncIterator[bytes],
        *,
        store_as: str | None,
        input_file_id: str | None,
        filename: str,
        deadline: float,
        metadata: dict[str, str],
        stored_key: str | None = None,
        completion_window: str | None = None,
        reservation: Reservation | None = None,
        output_ttl_s: int | None = None,
    ) -> BatchRecord:
        validator = make_validator(self._catalog, self._templates, model_id, line_format, endpoint)
        errors = self._blobs.open_writer(invalid_key(batch_id))

        async def refused_line(error: LineError) -> None:
            detail = {"code": error.code, "message": error.message, "line": error.line}
            record = output_record(batch_id, error.line, error.custom_id, error=detail)
            await errors.write(json.dumps(record).encode() + b"\n")

        writer = self._blobs.open_writer(store_as) if store_as is not None else None
        try:
            result = await ingest(source, validator, writer=writer, limits=self._limits, error_sink=refused_line)
        except BaseException:
            await errors.abort()
            raise
        if result.invalid:
            await errors.commit()
        else:
            await errors.abort()
        record = BatchRecord(
            batch_id=batch_id,
            team_id=team_id,
            model_id=model_id,
            line_format=line_format,
            endpoint=endpoint,
            input_key=store_as or stored_key or "",
            input_file_id=input_file_id,
            filename=filename,
            status=BatchStatus.IN_PROGRESS,
            created_at=self._clock(),
            deadline=deadline,
            total=result.lines,
            invalid=result.invalid,
            failed=result.invalid,
            metadata=metadata,
            completion_window=completion_window,
            input_bytes=result.bytes if reservation is not None else 0,
            output_ttl_s=output_ttl_s,
        )
        await self._queue.add(batch_id, result.chunks)  # before the record: a dispatcher finds both
        await self.batches.create(record, reserved=reservation.reserved if reservation is not None else 0)
        if reservation is not None:
            reservation.reserved = 0  # the record holds the bytes now
        return record

    async def first_model(self, file: FileRecord) -> str:
        """The model an OpenAI batch file names (its first line's `body.model`; every line must
        name the same one, which validation checks)."""
        head = b""
        try:
            async for piece in self._blobs.read(file.blob_key, chunk_bytes=64 * 1024):
                head += piece
                if b"\n" in head.lstrip() or len(head) > self._limits.max_bytes:
                    break
        except BlobNotFound:  # deleted since its record was read
            raise IngestRefused(404, f"file {file.file_id!r} was deleted") from None
        first = next((line for line in head.split(b"\n") if line.strip()), b"")
        try:
            model = json.loads(first)["body"]["model"]
        except (ValueError, KeyError, TypeError):
            model = None
        if not isinstance(model, str) or not model:
            raise IngestRefused(
                400, "the file's first line has no body.model: each line is {custom_id, method, url, body}"
            )
        return model

    async def read_optional(self, key: str) -> AsyncIterator[bytes]:
        """A stored file's bytes; nothing when it does not exist (a batch with no errors)."""
        if await self._blobs.size(key) is None:
            return
        async for piece in self._blobs.read(key):
            yield piece

    async def live_results(
        self, batch_id: str, outcomes: frozenset[Outcome], *, with_refused: bool
    ) -> AsyncIterator[bytes]:
        """A running batch's results so far; with the lines refused at upload first."""
        if with_refused:
            async for piece in self.read_optional(invalid_key(batch_id)):
                yield piece
        async for piece in self.results.read(batch_id, outcomes):
            yield piece
