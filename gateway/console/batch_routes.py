"""A team's batches and files in the console, through the API's own route functions.

    GET  /console/batches                   list (progress, counts, ETA, deadline, at risk), files, upload form
    GET  /console/batches/rows              the list's rows alone: what the page's script polls
    POST /console/batches                   multipart (model, deadline, file), X-CSRF-Token: the native
                                            POST /v1/batches itself, answered with its JSON (202 or error)
    GET  /console/batches/{id}              one batch; GET .../summary is its live part
    POST /console/batches/{id}/cancel       CSRF-checked form ─▶ 303 back
    GET  /console/batches/{id}/results      JSONL, as GET /v1/batches/{id}/results
    GET  /console/batches/{id}/errors       JSONL, as GET /v1/batches/{id}/errors
    GET  /console/files/{id}/content        a file's bytes, as GET /v1/files/{id}/content

The session stands in for the key: every call is the API's, with the principal the team's key
would have had, so a team sees only its own batches and files (another's is a 404), and an
upload is checked (size at the edge, model, deadline, every line) exactly as the API checks it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from contracts.errors import ApiError
from gateway.batch_schemas import BatchObject
from gateway.console.access import ConsoleDep, ConsoleRefusal, TeamSessionDep, check_csrf, principal_of
from gateway.deps import CatalogDep, IntakeDep
from gateway.routes import batches as batch_api
from gateway.routes import files as file_api

router = APIRouter(prefix="/console", include_in_schema=False)
LISTED = 50  # newest batches on the page
T = TypeVar("T")


async def as_page(call: Awaitable[T]) -> T:
    """The API function's answer; its refusal (another team's batch: 404) as a console page."""
    try:
        return await call
    except ApiError as exc:
        raise ConsoleRefusal(exc.status_code, exc.message) from None


def progress_percent(batch: BatchObject) -> float:
    """Entries that have ended (done, failed or expired) out of all."""
    total = batch.counts.total
    return 100.0 if total == 0 else round(100.0 * (total - batch.counts.pending) / total, 1)


async def _batches(intake: IntakeDep, console: ConsoleDep, session: TeamSessionDep) -> list[BatchObject]:
    listed = await batch_api.list_batches(intake, principal_of(session, console), limit=LISTED)
    return listed.data


@router.get("/batches")
async def batches_page(
    request: Request, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep, catalog: CatalogDep
) -> Response:
    principal = principal_of(session, console)
    files = await file_api.list_files(intake, principal)
    team = principal.team
    models = [m for m in catalog.ids() if team is not None and team.may_use(m)]
    return console.pages.render(
        request, "batches.html", session, batches=await _batches(intake, console, session), files=files,
        models=models, progress=progress_percent, default_deadline="24h",
    )  # fmt: skip


@router.get("/batches/rows")
async def batch_rows(console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep) -> Response:
    return console.pages.fragment(
        "batch_rows.html", batches=await _batches(intake, console, session), progress=progress_percent
    )


@router.post("/batches", status_code=202)
async def upload_batch(
    request: Request, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep, catalog: CatalogDep
) -> BatchObject:
    """The CSRF token comes as a header (the page's script sends the form with its progress),
    so it is checked before a byte of the upload is read."""
    check_csrf(request, session, None)
    return await batch_api.create_batch(request, intake, catalog, principal_of(session, console))


async def _batch(console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep, batch_id: str) -> BatchObject:
    return await as_page(batch_api.get_batch(batch_id, intake, principal_of(session, console)))


@router.get("/batches/{batch_id}")
async def batch_page(
    request: Request, batch_id: str, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep
) -> Response:
    batch = await _batch(console, session, intake, batch_id)
    return console.pages.render(request, "batch.html", session, batch=batch, progress=progress_percent)


@router.get("/batches/{batch_id}/summary")
async def batch_summary(batch_id: str, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep) -> Response:
    batch = await _batch(console, session, intake, batch_id)
    return console.pages.fragment("batch_summary.html", batch=batch, progress=progress_percent, session=session)


@router.post("/batches/{batch_id}/cancel")
async def cancel_batch(
    request: Request,
    batch_id: str,
    console: ConsoleDep,
    session: TeamSessionDep,
    intake: IntakeDep,
    csrf: Annotated[str | None, Form()] = None,
) -> RedirectResponse:
    check_csrf(request, session, csrf)
    batch = await as_page(batch_api.cancel_batch(batch_id, intake, principal_of(session, console)))
    return RedirectResponse(f"/console/batches/{batch.id}", status_code=303)


@router.get("/batches/{batch_id}/results")
async def batch_results(
    batch_id: str, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep
) -> StreamingResponse:
    return await as_page(batch_api.batch_results(batch_id, intake, principal_of(session, console)))


@router.get("/batches/{batch_id}/errors")
async def batch_errors(
    batch_id: str, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep
) -> StreamingResponse:
    return await as_page(batch_api.batch_errors(batch_id, intake, principal_of(session, console)))


@router.get("/files/{file_id}/content")
async def file_content(
    file_id: str, console: ConsoleDep, session: TeamSessionDep, intake: IntakeDep
) -> StreamingResponse:
    response = await as_page(file_api.file_content(file_id, intake, principal_of(session, console)))
    response.headers["Content-Disposition"] = f'attachment; filename="{file_id}.jsonl"'
    return response
