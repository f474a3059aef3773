"""Files, as OpenAI's Files API has them, for batches.

POST /v1/files                  multipart: file, purpose=batch (streamed to the blob store)
GET  /v1/files                  the team's files, newest first
GET  /v1/files/{id}             one file's record
GET  /v1/files/{id}/content     its bytes (a batch's output and error files too)
DELETE /v1/files/{id}           the file goes (a running batch that reads it still finishes)

An upload is kept only when the whole form is right: a refused one (purpose, expires_after,
over the team's storage quota, not JSONL, a cut body) leaves no blob and no record, whichever
order the fields came in. Files expire (`expires_after`, else `bulk.file_ttl_s`: 30 days).
"""

from __future__ import annotations

import re
import time

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from bulk.file_store import FileRecord
from bulk.ingest import IngestRefused
from bulk.multipart_upload import MultipartError, MultipartReader
from bulk.storage_quota import StorageQuotaExceeded
from contracts.caller_echo import echoed
from contracts.errors import ApiError, invalid_request
from contracts.schemas import ErrorBody, error_responses
from gateway.auth import PrincipalDep
from gateway.batch_schemas import FileDeleted, FileList, FileObject, FileStorage, file_object
from gateway.deps import IntakeDep
from gateway.routes.batches import JSONL, UPLOAD_REFUSED, refused, team_of
from gateway.upload_bodies import UPLOAD_FILE_BODY

router = APIRouter(prefix="/v1/files", tags=["files"])


# OpenAI's bounds on `expires_after.seconds`: an hour to 30 days.
MIN_EXPIRES_AFTER_S = 3600
MAX_EXPIRES_AFTER_S = 30 * 86400
_FILE_ID = re.compile(r"file-[A-Za-z0-9_-]{1,100}")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,15}")


def file_not_found(file_id: str) -> ApiError:
    return ApiError(404, "not_found_error", f"no file {echoed(file_id)} (GET /v1/files lists yours)", "file_id")


def storage_refused(exc: StorageQuotaExceeded) -> ApiError:
    """413: the upload does not fit what the team may still store (not retried by SDKs, unlike 429)."""
    return ApiError(413, "storage_quota_exceeded", exc.message, "file")


def _expires_after_s(fields: dict[str, str], default_s: int) -> int:
    """OpenAI's `expires_after` ({anchor: created_at, seconds}) as the SDK sends it in a form."""
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return default_s
    if anchor != "created_at":
        raise invalid_request(f"expires_after[anchor] must be 'created_at', got {echoed(anchor)}", "expires_after")
    if seconds is None or not seconds.strip().isdigit() or len(seconds.strip()) > 9:
        raise invalid_request(f"expires_after[seconds] must be an integer, got {echoed(seconds)}", "expires_after")
    value = int(seconds)
    if not MIN_EXPIRES_AFTER_S <= value <= MAX_EXPIRES_AFTER_S:
        raise invalid_request(
            f"expires_after[seconds] must be from {MIN_EXPIRES_AFTER_S} (1 hour) to {MAX_EXPIRES_AFTER_S} (30 days), "
            f"got {value}",
            "expires_after",
        )
    return value


def _check_form(fields: dict[str, str], *, complete: bool, default_ttl_s: int) -> int:
    """The form's fields; `complete` when the whole form has arrived (purpose is then required).
    Returns the file's lifetime in seconds."""
    purpose = fields.get("purpose")
    if purpose is not None and purpose != "batch":
        raise invalid_request(f"purpose must be 'batch', got {echoed(purpose)}", "purpose")
    if complete and purpose is None:
        raise invalid_request("send purpose=batch with the file", "purpose")
    return _expires_after_s(fields, default_ttl_s)


def _content_length(request: Request) -> int | None:
    raw = request.headers.get("content-length", "").strip()
    return int(raw) if _CONTENT_LENGTH.fullmatch(raw) else None


_UPLOAD_ERRORS = error_responses(413) | {
    400: {"model": ErrorBody, "description": f"{UPLOAD_REFUSED} Also: purpose other than batch, a bad expires_after."}
}


@router.post("", response_model=FileObject, responses=_UPLOAD_ERRORS, openapi_extra=UPLOAD_FILE_BODY)
async def upload_file(request: Request, intake: IntakeDep, principal: PrincipalDep) -> FileObject:
    """Upload a batch input file (`purpose=batch`, JSONL; optional `expires_after[anchor]=created_at`
    and `expires_after[seconds]`, 3600 to 2592000). Its lines are validated when a batch uses it;
    413 `storage_quota_exceeded` when the team's stored bytes would pass its quota."""
    team_id = team_of(principal)
    default_ttl_s = intake.retention.policy.file_ttl_s
    try:
        # Key, then size (the quota, from Content-Length), then content: before any body is read.
        async with await intake.begin_file(team_id, _content_length(request)) as upload:
            reader = MultipartReader(request.stream(), request.headers.get("content-type", ""))
            _check_form(await reader.fields_before_file(), complete=False, default_ttl_s=default_ttl_s)
            await upload.receive(reader.file_chunks())
            form = await reader.finish()
            ttl_s = _check_form(form.fields, complete=True, default_ttl_s=default_ttl_s)
            record = await upload.commit("batch", reader.filename or "upload.jsonl", ttl_s)
    except StorageQuotaExceeded as exc:
        raise storage_refused(exc) from None
    except (IngestRefused, MultipartError) as exc:
        raise refused(exc) from None
    return file_object(record)


@router.get("", response_model=FileList)
async def list_files(intake: IntakeDep, principal: PrincipalDep) -> FileList:
    """The team's files, newest first, and its storage: bytes stored and its quota."""
    team_id = team_of(principal)
    usage = await intake.quota.usage(team_id)
    return FileList(
        data=[file_object(r) for r in await intake.files.list_for_team(team_id)],
        storage=FileStorage(used_bytes=usage.used_bytes, limit_bytes=usage.limit_bytes),
    )


@router.get("/{file_id}", response_model=FileObject, responses=error_responses(404))
async def get_file(file_id: str, intake: IntakeDep, principal: PrincipalDep) -> FileObject:
    return file_object(await _owned(intake, principal, file_id))


@router.delete("/{file_id}", response_model=FileDeleted, responses=error_responses(404))
async def delete_file(file_id: str, intake: IntakeDep, principal: PrincipalDep) -> FileDeleted:
    """Delete a file: gone at once from the team's list and storage. A batch that is running on
    it still finishes (its bytes go when it ends); an output file's batch keeps its record."""
    record = await _owned(intake, principal, file_id)
    if not await intake.retention.delete_file(record, time.time()):
        raise file_not_found(file_id)  # another delete (or its expiry) came first
    return FileDeleted(id=file_id)


@router.get("/{file_id}/content", response_class=StreamingResponse, responses=error_responses(404))
async def file_content(file_id: str, intake: IntakeDep, principal: PrincipalDep) -> StreamingResponse:
    record = await _owned(intake, principal, file_id)
    return StreamingResponse(intake.read_optional(record.blob_key), media_type=JSONL)


async def _owned(intake: IntakeDep, principal: PrincipalDep, file_id: str) -> FileRecord:
    """The team's file; 404 for another team's, an unknown one, or an id no file can have."""
    team_id = team_of(principal)
    record = await intake.files.get_for_team(team_id, file_id) if _FILE_ID.fullmatch(file_id) else None
    if record is None:
        raise file_not_found(file_id)
    return record
