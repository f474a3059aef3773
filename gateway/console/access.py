"""Who may see what in the console, as FastAPI dependencies over the session cookie.

    no session            GET of a page ─▶ 303 to /console/signin?next=PATH
                          anything else ─▶ 401 (JSON error object for the script, else a page)
    a team's session      the team's pages; an operator page ─▶ 403
    the operator's        the operator's pages (keys, fleet) and every team's usage
    a POST                the Origin (when sent) must be this host, and the form's or the
                          X-CSRF-Token header's token the session's ─▶ else 403

The console is outside /v1, so the edge guard asks it for no key: these checks are its own.
`ConsoleState` is what the gateway's lifespan builds for the console (`open_console`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote, urlsplit

import redis
from fastapi import Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from config.settings import SwitchyardConfig
from contracts.errors import error_detail, error_kind
from fleet_state.load_board import LoadBoard
from fleet_state.pool_targets import PoolTargetStore
from gateway.console.pages import ConsolePages
from gateway.console.sessions import COOKIE_NAME, ConsoleSession, SessionStore, csrf_matches
from gateway.edge_keys import KeyCache
from quota.capacity import CapacitySource
from quota.keys import KeyStore
from serving.principal import Principal

CONSOLE_STATE = "console"  # app.state.console: the ConsoleState of this app
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class ConsoleState:
    """What the console reads from: the API's own stores, plus its sessions and templates."""

    config: SwitchyardConfig
    pages: ConsolePages
    sessions: SessionStore
    keys: KeyStore
    key_cache: KeyCache  # revocations go through it, so this process stops a key at once
    load_board: LoadBoard
    targets: PoolTargetStore
    capacity: CapacitySource


class ConsoleRefusal(Exception):
    """A console request refused; the handler answers it as a page, a redirect or JSON."""

    def __init__(self, status_code: int, message: str, *, sign_in: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.sign_in = sign_in


async def get_console(request: Request) -> ConsoleState:
    state = getattr(request.app.state, CONSOLE_STATE, None)
    if not isinstance(state, ConsoleState):
        raise RuntimeError("the console is not open: call gateway.console.open_console in the lifespan")
    return state


ConsoleDep = Annotated[ConsoleState, Depends(get_console)]


async def optional_session(request: Request, console: ConsoleDep) -> ConsoleSession | None:
    try:
        return await console.sessions.get(request.cookies.get(COOKIE_NAME))
    except redis.RedisError:
        raise ConsoleRefusal(503, "sessions cannot be checked right now; retry shortly") from None


async def require_session(session: Annotated[ConsoleSession | None, Depends(optional_session)]) -> ConsoleSession:
    if session is None:
        raise ConsoleRefusal(401, "sign in with your API key first", sign_in=True)
    return session


async def require_team(session: Annotated[ConsoleSession, Depends(require_session)]) -> ConsoleSession:
    if session.team_id is None:
        raise ConsoleRefusal(403, "batches and files belong to teams: sign in with a team's key to see them")
    return session


async def require_admin(session: Annotated[ConsoleSession, Depends(require_session)]) -> ConsoleSession:
    if not session.is_admin:
        raise ConsoleRefusal(403, "this page is for operators: sign in with the admin key")
    return session


def check_origin(request: Request) -> None:
    """A cross-site POST is refused even before its token is looked at (the browser says
    where a form came from in Origin and Sec-Fetch-Site)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ConsoleRefusal(403, "a console form must be sent from the console itself")
    origin = request.headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host", "")):
        raise ConsoleRefusal(403, "a console form must be sent from the console itself")


def check_csrf(request: Request, session: ConsoleSession, form_token: str | None) -> None:
    check_origin(request)
    token = form_token if form_token is not None else request.headers.get(CSRF_HEADER)
    if not csrf_matches(session, token):
        raise ConsoleRefusal(403, "the form is stale or not from this session; reload the page and try again")


def principal_of(session: ConsoleSession, console: ConsoleState) -> Principal:
    """The API's view of the session's caller: the same checks as a request with its key."""
    team = console.config.teams.get(session.team_id) if session.team_id is not None else None
    return Principal(team_id=session.team_id, is_admin=session.is_admin, team=team)


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "") or request.headers.get("x-console") == "script"


async def on_console_refusal(request: Request, exc: Exception) -> Response:
    """Answer a `ConsoleRefusal`: a person's GET is sent to sign in; the script gets the API's
    error object; anything else a page that says what to do."""
    assert isinstance(exc, ConsoleRefusal)
    if exc.sign_in and request.method == "GET" and not wants_json(request):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/console/signin?next={quote(target, safe='')}", status_code=303)
    if wants_json(request):
        kind, code = error_kind(exc.status_code, _ERROR_TYPES.get(exc.status_code, "invalid_request_error"))
        return JSONResponse({"error": error_detail(kind, exc.message, None, code)}, status_code=exc.status_code)
    state = getattr(request.app.state, CONSOLE_STATE, None)
    if not isinstance(state, ConsoleState):
        return JSONResponse({"error": error_detail("server_error", exc.message, None, "service_unavailable")}, 503)
    return state.pages.render(request, "error.html", None, exc.status_code, message=exc.message)


_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 503: "server_error"}

SessionDep = Annotated[ConsoleSession, Depends(require_session)]
OptionalSessionDep = Annotated[ConsoleSession | None, Depends(optional_session)]
TeamSessionDep = Annotated[ConsoleSession, Depends(require_team)]
AdminSessionDep = Annotated[ConsoleSession, Depends(require_admin)]
