"""Batches: native and OpenAI-compatible on the same paths.

    POST /v1/batches                 multipart (file, model, deadline): native, validated as it uploads
                                     JSON {input_file_id, endpoint, completion_window}: OpenAI
    GET  /v1/batches                 the team's batches, newest first (?limit, ?after)
    GET  /v1/batches/{id}            status, counts, times, ETA, links
    GET  /v1/batches/{id}/results    JSONL, streamed (what has finished so far, until it ends)
    GET  /v1/batches/{id}/errors     JSONL: refused lines, failed and expired entries
    POST /v1/batches/{id}/cancel     no new releases; running entries end; the rest are cancelled

Another team's batch is a 404, as if it did not exist.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from bulk.batch_store import BatchRecord, BatchStatus
from bulk.deadlines import parse_deadline
from bulk.ingest import IngestRefused
from bulk.intake import BatchIntake
from bulk.multipart_upload import MultipartError, MultipartReader
from bulk.results import Outcome, errors_key, results_key
from bulk.storage_quota import StorageQuotaExceeded
from contracts.caller_echo import echoed
from contracts.errors import ApiError, describe_validation_errors, invalid_request, model_not_found
from contracts.schemas import ErrorBody, error_responses
from gateway.auth import PrincipalDep
from gateway.batch_schemas import (
    BatchList,
    BatchObject,
    CreateBatchBody,
    batch_object,
    window_text,
)
from gateway.deps import CatalogDep, IntakeDep
from gateway.upload_bodies import CREATE_BATCH_BODY
from serving.principal import Principal, require_model_access

router = APIRouter(prefix="/v1/batches", tags=["batches"])

JSONL = "application/jsonl"


def team_of(principal: Principal) -> str:
    if principal.team_id is None:
        raise ApiError(403, "permission_error", "the admin key belongs to no team; send a team's API key", None)
    return principal.team_id


def batch_not_found(batch_id: str) -> ApiError:
    return ApiError(404, "not_found_error", f"no batch {echoed(batch_id)} (GET /v1/batches lists yours)", "batch_id")


def refused(exc: IngestRefused | MultipartError) -> ApiError:
    if isinstance(exc, StorageQuotaExceeded):
        return ApiError(413, "storage_quota_exceeded", exc.message, "file")
    if isinstance(exc, IngestRefused):
        status_type = "request_too_large" if exc.status == 413 else "invalid_request_error"
        return ApiError(exc.status, status_type, exc.message, "file")
    return invalid_request(str(exc), "file")


def _window(value: str | None, intake: BatchIntake) -> str:
    """The batch's `completion_window` as the client sent it (the longest allowed if none)."""
    return value if value is not None and value.strip() else window_text(intake.max_deadline_s)


def _deadline(value: str | None, intake: BatchIntake) -> float:
    try:
        return parse_deadline(value, time.time(), intake.max_deadline_s)
    except ValueError as exc:
        raise invalid_request(str(exc), "deadline") from None


# What a refused upload is (files.py's too): the whole file is refused, and nothing is kept.
UPLOAD_REFUSED = (
    "The form or the file is refused: a field missing or malformed, a file that is not JSONL (one JSON "
    "request per line, UTF-8) or holds no requests, a line the batch cannot run. Nothing is kept."
)


@router.post(
    "",
    response_model=BatchObject,
    status_code=202,
    responses=error_responses(403, 404, 413)
    | {400: {"model": ErrorBody, "description": f"{UPLOAD_REFUSED} Also: a deadline past the maximum."}},
    openapi_extra=CREATE_BATCH_BODY,
)
async def create_batch(
    request: Request, intake: IntakeDep, catalog: CatalogDep, principal: PrincipalDep
) -> BatchObject:
    """Create a batch. Multipart (native): `file` (JSONL of {prompt, max_tokens, custom_id?, ...}),
    `model`, `deadline` (6h, 90m, or an RFC 3339 time; at most and by default 24 h). JSON
    (OpenAI): `input_file_id` of a `purpose=batch` file, `endpoint`, `completion_window`."""
    team_id = team_of(principal)
    content_type = request.headers.get("content-type", "")
    try:
        if content_type.startswith("application/json"):
            record = await _from_json(request, intake, catalog, principal, team_id)
        else:
            record = await _from_upload(request, intake, catalog, principal, team_id, content_type)
    except (IngestRefused, MultipartError) as exc:
        raise refused(exc) from None
    return batch_object(record)


async def _from_upload(
    request: Request, intake: BatchIntake, catalog: CatalogDep, principal: Principal, team_id: str, content_type: str
) -> BatchRecord:
    reader = MultipartReader(request.stream(), content_type)
    fields = await reader.fields_before_file()
    if "model" in fields:
        model_id = _model(fields["model"], catalog, principal)
        deadline = _deadline(fields.get("deadline"), intake)
        record = await intake.from_upload(
            team_id, model_id, reader.file_chunks(), filename=reader.filename or "upload.jsonl", deadline=deadline,
            completion_window=_window(fields.get("deadline"), intake),
        )  # fmt: skip
        await reader.finish()
        return record
    # The fields came after the file: keep the file first, then validate it where it lies.
    stored = await intake.store_file(team_id, "batch", reader.filename or "upload.jsonl", reader.file_chunks())
    try:
        form = await reader.finish()
        if "model" not in form.fields:
            raise invalid_request("the form needs a 'model' field (send it before the file)", "model")
        model_id = _model(form.fields["model"], catalog, principal)
        deadline = _deadline(form.fields.get("deadline"), intake)
        return await intake.from_file(
            team_id, model_id, stored, "/v1/generate", deadline=deadline, line_format="native",
            completion_window=_window(form.fields.get("deadline"), intake),
        )  # fmt: skip
    except BaseException:  # a refused batch leaves nothing behind: not its file either
        await intake.discard_file(stored)
        raise


async def _from_json(
    request: Request, intake: BatchIntake, catalog: CatalogDep, principal: Principal, team_id: str
) -> BatchRecord:
    try:
        body = CreateBatchBody.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid_request(*describe_validation_errors(exc.errors())) from None
    file = await intake.files.get_for_team(team_id, body.input_file_id)
    if file is None:
        message = f"no file {echoed(body.input_file_id)} (POST /v1/files)"
        raise ApiError(404, "not_found_error", message, "input_file_id")
    if file.purpose != "batch":
        raise invalid_request(f"file {file.file_id!r} has purpose {file.purpose!r}; upload with purpose=batch")
    model_id = _model(await intake.first_model(file), catalog, principal)
    deadline = _deadline(body.completion_window, intake)
    return await intake.from_file(
        team_id, model_id, file, body.endpoint, deadline=deadline, metadata=body.metadata,
        completion_window=body.completion_window,
        output_ttl_s=None if body.output_expires_after is None else body.output_expires_after.seconds,
    )  # fmt: skip


def _model(model_id: str, catalog: CatalogDep, principal: Principal) -> str:
    if catalog.get(model_id) is None:
        raise model_not_found(model_id, catalog.ids())
    require_model_access(principal, principal.team, model_id)
    return model_id


_LIST_REFUSED = (
    "`limit` out of range, or `after` that names none of your batches (code `invalid_cursor`): not a "
    "restart from the first page, which would show a client paging on the same batches twice."
)


@router.get("", response_model=BatchList, responses={400: {"model": ErrorBody, "description": _LIST_REFUSED}})
async def list_batches(
    intake: IntakeDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[
        str | None, Query(min_length=1, description="the last_id of the previous page; omit it for the first")
    ] = None,
) -> BatchList:
    team_id = team_of(principal)
    if after is not None and await intake.batches.get_for_team(team_id, after) is None:
        # Not a silent restart from the first page: a client paging on would see batches twice.
        message = f"after={echoed(after)} names none of your batches; pass the last_id of the previous page"
        raise invalid_request(message, "after", "invalid_cursor")
    records = await intake.batches.list_for_team(team_id, limit + 1, after)
    data = [batch_object(record) for record in records[:limit]]
    return BatchList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(records) > limit,
    )


async def _owned(intake: BatchIntake, principal: Principal, batch_id: str) -> BatchRecord:
    record = await intake.batches.get_for_team(team_of(principal), batch_id)
    if record is None:
        raise batch_not_found(batch_id)
    return record


@router.get("/{batch_id}", response_model=BatchObject, responses=error_responses(404))
async def get_batch(batch_id: str, intake: IntakeDep, principal: PrincipalDep) -> BatchObject:
    return batch_object(await _owned(intake, principal, batch_id))


@router.post("/{batch_id}/cancel", response_model=BatchObject, responses=error_responses(404))
async def cancel_batch(batch_id: str, intake: IntakeDep, principal: PrincipalDep) -> BatchObject:
    """Stop releasing the batch's entries; running ones end, the rest are cancelled (in the
    errors file). A batch that has already ended is returned as it is."""
    record = await _owned(intake, principal, batch_id)
    await intake.batches.transition(
        batch_id,
        BatchStatus.CANCELLING,
        allowed_from=(BatchStatus.IN_PROGRESS, BatchStatus.VALIDATING),
        stamp="cancelling_at",
        now=time.time(),
    )
    return batch_object(await intake.batches.get(batch_id) or record)


@router.get("/{batch_id}/results", response_class=StreamingResponse, responses=error_responses(404))
async def batch_results(batch_id: str, intake: IntakeDep, principal: PrincipalDep) -> StreamingResponse:
    """The responses so far, one JSON line per entry: {id, custom_id, line, response, error}."""
    record = await _owned(intake, principal, batch_id)
    return _jsonl(_outcome_stream(intake, record, errors=False), f"{batch_id}_results.jsonl")


@router.get("/{batch_id}/errors", response_class=StreamingResponse, responses=error_responses(404))
async def batch_errors(batch_id: str, intake: IntakeDep, principal: PrincipalDep) -> StreamingResponse:
    """Refused lines, failed and expired entries so far, one JSON line each, with the reason."""
    record = await _owned(intake, principal, batch_id)
    return _jsonl(_outcome_stream(intake, record, errors=True), f"{batch_id}_errors.jsonl")


def _outcome_stream(intake: BatchIntake, record: BatchRecord, *, errors: bool) -> AsyncIterator[bytes]:
    if record.status.ended:  # compacted into one file (or none when nothing went there)
        return intake.read_optional(errors_key(record.batch_id) if errors else results_key(record.batch_id))
    outcomes = frozenset({Outcome.FAILED, Outcome.EXPIRED} if errors else {Outcome.DONE})
    return intake.live_results(record.batch_id, outcomes, with_refused=errors)


def _jsonl(chunks: AsyncIterator[bytes], filename: str) -> StreamingResponse:
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return StreamingResponse(chunks, media_type=JSONL, headers=headers)
