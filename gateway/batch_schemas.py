"""Batch and file bodies of the HTTP API: one batch object for the native and the OpenAI routes.

The batch object is OpenAI's (`id`, `object: "batch"`, `status`, `request_counts`, the `*_at`
times, `output_file_id`, `error_file_id`), so the official SDK reads it, plus what the native
API shows: counts with `expired` and `pending`, the deadline, an ETA, whether the batch is at
risk of missing its deadline, and links to its results and errors.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from bulk.batch_store import BatchRecord, BatchStatus
from bulk.file_store import FileRecord
from bulk.release_policy import DeadlineRisk
from contracts.field_checks import (
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    UnicodeChecked,
    metadata_bounds,
)


class OutputExpiresAfter(BaseModel):
    """OpenAI's expiry of a batch's output and error files: `seconds` after they are written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    anchor: Literal["created_at"]
    seconds: Annotated[int, Field(ge=3600, le=2_592_000)]


# The document's `metadata`: OpenAI's bounds, which `metadata_bounds` keeps.
_METADATA = {
    "anyOf": [
        {
            "type": "object",
            "maxProperties": MAX_METADATA_PAIRS,
            "propertyNames": {"maxLength": MAX_METADATA_KEY_CHARS},
            "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE_CHARS},
        },
        {"type": "null"},
    ]
}


class CreateBatchBody(UnicodeChecked):
    """POST /v1/batches with JSON: OpenAI's form, from an uploaded file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_file_id: Annotated[str, Field(min_length=1)]
    endpoint: Literal["/v1/completions", "/v1/chat/completions"]
    completion_window: str = "24h"  # OpenAI allows only "24h"; a shorter duration works here too
    metadata: Annotated[dict[str, str] | None, AfterValidator(metadata_bounds), WithJsonSchema(_METADATA)] = None
    output_expires_after: OutputExpiresAfter | None = None  # default: bulk.output_file_ttl_s


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class Counts(BaseModel):
    total: int
    done: int
    failed: int
    expired: int
    pending: int


class BatchLinks(BaseModel):
    self: str
    results: str
    errors: str


class BatchObject(BaseModel):
    id: str
    batch_id: str  # the same as `id`: the native API's name for it (docs/batches.md)
    object: Literal["batch"] = "batch"
    endpoint: str
    model: str
    errors: None = None
    input_file_id: str | None
    completion_window: str
    status: str
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None = None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str]
    # Native fields.
    filename: str
    counts: Counts
    deadline: str
    started_at: int | None
    finished_at: int | None
    eta_s: float | None
    at_risk: bool
    links: BatchLinks


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"] = "processed"
    expires_at: int | None = None  # when the file is deleted (bulk/retention.py); None: kept


class FileStorage(BaseModel):
    """What the team stores (uploads, native batch inputs, output files) and may store."""

    used_bytes: int
    limit_bytes: int


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    has_more: bool = False
    storage: FileStorage | None = None


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


def file_object(record: FileRecord) -> FileObject:
    return FileObject(
        id=record.file_id,
        bytes=record.bytes,
        created_at=int(record.created_at),
        filename=record.filename,
        purpose=record.purpose,
        expires_at=None if record.expires_at is None else int(record.expires_at),
    )


def batch_object(record: BatchRecord, now: float | None = None) -> BatchObject:
    now = time.time() if now is None else now
    status = record.status
    finished = _int(record.finished_at)
    links = f"/v1/batches/{record.batch_id}"
    return BatchObject(
        id=record.batch_id,
        batch_id=record.batch_id,
        endpoint=record.endpoint,
        model=record.model_id,
        input_file_id=record.input_file_id,
        completion_window=(
            record.completion_window
            if record.completion_window is not None
            else window_text(record.deadline - record.created_at)
        ),
        status=status.value,
        output_file_id=record.output_file_id,
        error_file_id=record.error_file_id,
        created_at=int(record.created_at),
        in_progress_at=int(record.created_at),
        expires_at=int(record.deadline),
        finalizing_at=_int(record.finalizing_at),
        completed_at=finished if status is BatchStatus.COMPLETED else None,
        expired_at=finished if status is BatchStatus.EXPIRED else None,
        cancelling_at=_int(record.cancelling_at),
        cancelled_at=finished if status is BatchStatus.CANCELLED else None,
        request_counts=RequestCounts(total=record.total, completed=record.done, failed=record.failed + record.expired),
        metadata=record.metadata,
        filename=record.filename,
        counts=Counts(
            total=record.total,
            done=record.done,
            failed=record.failed,
            expired=record.expired,
            pending=record.pending,
        ),
        deadline=datetime.fromtimestamp(record.deadline, UTC).isoformat().replace("+00:00", "Z"),
        started_at=_int(record.started_at),
        finished_at=finished,
        eta_s=None if status.ended else _eta_s(record, now),
        at_risk=record.at_risk and not status.ended,
        links=BatchLinks(self=links, results=f"{links}/results", errors=f"{links}/errors"),
    )


def _eta_s(record: BatchRecord, now: float) -> float | None:
    """Pending entries at the batch's average pace since its first entry was released."""
    if record.started_at is None:
        return None
    ran = record.finished_entries - record.invalid
    elapsed = now - record.started_at
    rate = ran / elapsed if elapsed > 0 and ran > 0 else None
    eta = DeadlineRisk().eta_s(record.pending, rate)
    return None if eta is None else round(eta, 1)


def window_text(seconds: float) -> str:
    """A window in hours when it is whole hours ("24h"), else in seconds ("5400s")."""
    hours = seconds / 3600
    return f"{round(hours)}h" if abs(hours - round(hours)) < 1e-6 and hours >= 1 else f"{round(seconds)}s"


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
