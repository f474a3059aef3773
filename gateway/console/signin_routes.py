"""Signing in and out of the console, its front door, and its two static files.

GET  /console                 ─▶ your first page (usage), or sign in
GET  /console/signin          the form: one field, the API key
POST /console/signin          key ─▶ a session cookie (gateway/console/sessions.py) ─▶ 303 next
POST /console/signout         CSRF-checked; ends the session and clears the cookie
GET  /console/static/{name}   console.css, console.js
"""

from __future__ import annotations

from typing import Annotated

import redis
from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from contracts.caller_echo import echoed
from gateway.console.access import ConsoleDep, ConsoleRefusal, OptionalSessionDep, SessionDep, check_csrf, check_origin
from gateway.console.pages import static_file
from gateway.console.sessions import COOKIE_NAME, COOKIE_PATH, MAX_KEY_CHARS

router = APIRouter(prefix="/console", include_in_schema=False)
HOME = "/console/usage"


def request_is_tls(request: Request) -> bool:
    """Whether the person reached us over TLS: directly, or through a proxy that says so."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site: `//evil`)."""
    if target and target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return HOME


@router.get("")
async def console_home(session: OptionalSessionDep) -> RedirectResponse:
    return RedirectResponse(HOME if session is not None else "/console/signin", status_code=303)


@router.get("/signin")
async def signin_page(
    request: Request, console: ConsoleDep, session: OptionalSessionDep, next: str | None = None
) -> Response:
    return console.pages.render(request, "signin.html", session, next=safe_next(next), message=None)


@router.post("/signin")
async def sign_in(
    request: Request,
    console: ConsoleDep,
    key: Annotated[str, Form(max_length=MAX_KEY_CHARS * 2)] = "",
    next: Annotated[str, Form(max_length=2048)] = HOME,
) -> Response:
    check_origin(request)  # no login CSRF: a foreign site cannot sign you in as someone else
    try:
        session = await console.sessions.sign_in(key)
    except redis.RedisError:
        raise ConsoleRefusal(503, "keys cannot be checked right now; retry shortly") from None
    if session is None:
        message = (
            "That key is not valid (unknown or revoked). An operator makes one with `switchyard keys create TEAM`."
        )
        return console.pages.render(request, "signin.html", None, 401, next=safe_next(next), message=message)
    target = safe_next(next)
    if session.is_admin and target == HOME:
        target = "/console/fleet"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE_NAME, session.session_id, max_age=console.sessions.ttl_s, path=COOKIE_PATH,
        httponly=True, samesite="strict", secure=request_is_tls(request),
    )  # fmt: skip
    return response


@router.post("/signout")
async def sign_out(
    request: Request, console: ConsoleDep, session: SessionDep, csrf: Annotated[str | None, Form()] = None
) -> RedirectResponse:
    check_csrf(request, session, csrf)
    try:
        await console.sessions.sign_out(session.session_id)
    except redis.RedisError:
        raise ConsoleRefusal(503, "cannot sign out right now; retry shortly") from None
    response = RedirectResponse("/console/signin", status_code=303)
    response.delete_cookie(
        COOKIE_NAME, path=COOKIE_PATH, httponly=True, samesite="strict", secure=request_is_tls(request)
    )
    return response


@router.get("/static/{name}")
async def console_static(name: str) -> Response:
    response = static_file(name)
    if response is None:
        raise ConsoleRefusal(404, f"no console file {echoed(name)}")
    return response
