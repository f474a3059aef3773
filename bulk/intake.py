"""From an upload to a queued batch (the gateway's side of bulk).

native    POST /v1/batches (multipart: file, model, deadline)
             file ──stream──▶ ingest ──▶ blob batches/{id}/input.jsonl
OpenAI    POST /v1/files (purpose=batch) ──▶ blob files/{file_id}
          POST /v1/batches {input_file_id, endpoint}
             blob files/{file_id} ──stream──▶ ingest (validation only; the file stays put)

then      refused lines ──▶ blob batches/{id}/invalid.jsonl (the start of the errors file)
          chunk references ──▶ the batch's queue; the record ──▶ in_progress, active
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import redis.asyncio as aioredis

from bulk.batch_lines import GENERATE_ENDPOINT, LineError, LineValidator
from bulk.batch_store import BatchRecord, BatchStatus, BatchStore, new_batch_id
from bulk.blob_store import BlobStore
from bulk.chunk_queue import ChunkQueue
from bulk.file_store import FileRecord, FileStore, new_file_id, uploaded_file_key
from bulk.ingest import IngestLimits, IngestRefused, ingest
from bulk.results import Outcome, ResultStore, input_key, invalid_key, output_record
from config.settings import SwitchyardConfig
from contracts.catalog import ModelCatalog
from contracts.chat_template import ChatMessage, ChatTemplates


def make_validator(
    catalog: ModelCatalog, templates: ChatTemplates, model_id: str, line_format: str, endpoint: str
) -> LineValidator:
    """The validator of one batch's lines: the same at upload and when the dispatcher re-reads them."""
    model = catalog.get(model_id)
    if model is None:
        raise LookupError(f"model {model_id!r} is not configured")

    def render(messages: list[ChatMessage]) -> str:
        return templates.render(model, messages)

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

    async def store_file(self, team_id: str, purpose: str, filename: str, source: AsyncIterator[bytes]) -> FileRecord:
        """Keep an upload as it is (OpenAI's Files API); it is validated when a batch uses it."""
        file_id = new_file_id()
        writer = self._blobs.open_writer(uploaded_file_key(file_id))
        size = 0
        try:
            async for piece in source:
                size += len(piece)
                if size > self._max_bytes:
                    raise IngestRefused(
                        413, f"the file is larger than the {self._max_bytes // 2**20} MB limit: split it"
                    )
                await writer.write(piece)
            await writer.commit()
        except BaseException:
            await writer.abort()
            raise
        return await self.files.create(team_id, purpose, filename, size, uploaded_file_key(file_id), file_id=file_id)

    async def from_upload(
        self,
        team_id: str,
        model_id: str,
        source: AsyncIterator[bytes],
        *,
        filename: str,
        deadline: float,
        metadata: dict[str, str] | None = None,
    ) -> BatchRecord:
        """A native batch: the file streams into the blob store as it is validated."""
        batch_id = new_batch_id()
        return await self._create(
            batch_id, team_id, model_id, "native", GENERATE_ENDPOINT, source,
            store_as=input_key(batch_id), input_file_id=None, filename=filename, deadline=deadline,
            metadata=metadata or {},
        )  # fmt: skip

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
    ) -> BatchRecord:
        """A batch over an uploaded file: validated from the blob store, read in place."""
        return await self._create(
            new_batch_id(), team_id, model_id, line_format, endpoint, self._blobs.read(file.blob_key),
            store_as=None, input_file_id=file.file_id, filename=file.filename, deadline=deadline,
            metadata=metadata or {}, stored_key=file.blob_key,
        )  # fmt: skip

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
        )
        await self._queue.add(batch_id, result.chunks)  # before the record: a dispatcher finds both
        await self.batches.create(record)
        return record

    async def first_model(self, file: FileRecord) -> str:
        """The model an OpenAI batch file names (its first line's `body.model`; every line must
        name the same one, which validation checks)."""
        head = b""
        async for piece in self._blobs.read(file.blob_key, chunk_bytes=64 * 1024):
            head += piece
            if b"\n" in head.lstrip() or len(head) > self._limits.max_bytes:
                break
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
