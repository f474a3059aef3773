"""API keys for operators (the admin key's session): what `switchyard keys` does, in a page.

    GET  /console/keys               every key: team, where it lives, its hash's first characters
    POST /console/keys               team ─▶ a new key, shown on the answer once (never stored)
    POST /console/keys/revoke        key_hash ─▶ the key stops working (its console sessions end)

A team's session gets 403 on all three.
"""

from __future__ import annotations

from typing import Annotated

import redis
from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from gateway.console.access import AdminSessionDep, ConsoleDep, ConsoleRefusal, ConsoleState, check_csrf
from gateway.console.sessions import ConsoleSession
from quota.keys import UnknownTeam

router = APIRouter(prefix="/console/keys", include_in_schema=False)
_KEY_HASH_CHARS = 64


async def _page(
    request: Request, console: ConsoleState, session: ConsoleSession, *, created: str | None = None,
    created_team: str | None = None, revoked: bool = False,
) -> Response:  # fmt: skip
    try:
        entries = await console.keys.list()
    except redis.RedisError:
        raise ConsoleRefusal(503, "keys cannot be read right now; retry shortly") from None
    return console.pages.render(
        request, "keys.html", session, entries=entries, teams=sorted(console.config.teams), created=created,
        created_team=created_team, revoked=revoked,
    )  # fmt: skip


@router.get("")
async def keys_page(request: Request, console: ConsoleDep, session: AdminSessionDep, revoked: bool = False) -> Response:
    return await _page(request, console, session, revoked=revoked)


@router.post("")
async def create_key(
    request: Request,
    console: ConsoleDep,
    session: AdminSessionDep,
    team: Annotated[str, Form(max_length=200)],
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    check_csrf(request, session, csrf)
    try:
        key = await console.keys.create(team)
    except UnknownTeam as exc:
        raise ConsoleRefusal(400, str(exc)) from None
    except redis.RedisError:
        raise ConsoleRefusal(503, "the key could not be stored right now; retry shortly") from None
    return await _page(request, console, session, created=key, created_team=team)


@router.post("/revoke")
async def revoke_key(
    request: Request,
    console: ConsoleDep,
    session: AdminSessionDep,
    key_hash: Annotated[str, Form(max_length=_KEY_HASH_CHARS)],
    csrf: Annotated[str | None, Form()] = None,
) -> RedirectResponse:
    check_csrf(request, session, csrf)
    try:
        found = await console.key_cache.revoke(key_hash)
    except redis.RedisError:
        raise ConsoleRefusal(503, "the key could not be revoked right now; retry shortly") from None
    if not found:
        raise ConsoleRefusal(404, "no such key (a key listed under switchyard.yaml's api_key_hashes is revoked there)")
    return RedirectResponse("/console/keys?revoked=true", status_code=303)
