"""Files, as OpenAI's Files API has them, for batches.

POST /v1/files                  multipart: file, purpose=batch (streamed to the blob store)
GET  /v1/files                  the team's files, newest first
GET  /v1/files/{id}             one file's record
GET  /v1/files/{id}/content     its bytes (a batch's output and error files too)
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from bulk.ingest import IngestRefused
from bulk.multipart_upload import MultipartError, MultipartReader
from contracts.errors import ApiError, invalid_request
from contracts.schemas import error_responses
from gateway.auth import PrincipalDep
from gateway.batch_schemas import FileList, FileObject, file_object
from gateway.deps import IntakeDep
from gateway.routes.batches import JSONL, refused, team_of

router = APIRouter(prefix="/v1/files", tags=["files"])


def file_not_found(file_id: str) -> ApiError:
    return ApiError(404, "not_found_error", f"no file {file_id!r} (GET /v1/files lists yours)", "file_id")


@router.post("", response_model=FileObject, responses=error_responses(400, 413))
async def upload_file(request: Request, intake: IntakeDep, principal: PrincipalDep) -> FileObject:
    """Upload a batch input file (`purpose=batch`, JSONL); it is validated when a batch uses it."""
    team_id = team_of(principal)
    try:
        reader = MultipartReader(request.stream(), request.headers.get("content-type", ""))
        fields = await reader.fields_before_file()
        purpose = fields.get("purpose")
        if purpose is not None and purpose != "batch":
            raise invalid_request(f"purpose must be 'batch', got {purpose!r}", "purpose")
        record = await intake.store_file(team_id, "batch", reader.filename or "upload.jsonl", reader.file_chunks())
        form = await reader.finish()
    except (IngestRefused, MultipartError) as exc:
        raise refused(exc) from None
    if form.fields.get("purpose") != "batch":
        raise invalid_request("send purpose=batch with the file", "purpose")
    return file_object(record)


@router.get("", response_model=FileList)
async def list_files(intake: IntakeDep, principal: PrincipalDep) -> FileList:
    return FileList(data=[file_object(r) for r in await intake.files.list_for_team(team_of(principal))])


@router.get("/{file_id}", response_model=FileObject, responses=error_responses(404))
async def get_file(file_id: str, intake: IntakeDep, principal: PrincipalDep) -> FileObject:
    record = await intake.files.get_for_team(team_of(principal), file_id)
    if record is None:
        raise file_not_found(file_id)
    return file_object(record)


@router.get("/{file_id}/content", response_class=StreamingResponse, responses=error_responses(404))
async def file_content(file_id: str, intake: IntakeDep, principal: PrincipalDep) -> StreamingResponse:
    record = await intake.files.get_for_team(team_of(principal), file_id)
    if record is None:
        raise file_not_found(file_id)
    return StreamingResponse(intake.read_optional(record.blob_key), media_type=JSONL)
