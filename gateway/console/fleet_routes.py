"""The fleet for operators: servers by pool, their load, the autoscaler's targets and reasons.

GET  /console/fleet                              the page (its pools part refreshes itself)
GET  /console/fleet/pools                        that part alone, for the page's script
GET  /console/fleet/servers/{id}/drain           "drain SERVER?": the confirmation
POST /console/fleet/servers/{id}/drain           CSRF-checked: what `switchyard drain` does ─▶ 303
"""

from __future__ import annotations

import time
from typing import Annotated

import redis
from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from contracts.caller_echo import echoed
from fleet_state.registry import ServerRegistry
from gateway.console.access import AdminSessionDep, ConsoleDep, ConsoleRefusal, ConsoleState, check_csrf
from gateway.console.fleet_view import PoolView, read_fleet
from gateway.deps import ServerRegistryDep

router = APIRouter(prefix="/console/fleet", include_in_schema=False)


async def _pools(console: ConsoleState, servers: ServerRegistry) -> tuple[list[PoolView], float]:
    now = time.time()
    try:
        return await read_fleet(servers, console.load_board, console.targets, console.config.pools, now), now
    except redis.RedisError:
        raise ConsoleRefusal(503, "the fleet cannot be read right now; retry shortly") from None


@router.get("")
async def fleet_page(
    request: Request, console: ConsoleDep, session: AdminSessionDep, servers: ServerRegistryDep
) -> Response:
    pools, now = await _pools(console, servers)
    return console.pages.render(request, "fleet.html", session, pools=pools, now=now)


@router.get("/pools")
async def fleet_pools(console: ConsoleDep, session: AdminSessionDep, servers: ServerRegistryDep) -> Response:
    pools, now = await _pools(console, servers)
    return console.pages.fragment("fleet_pools.html", pools=pools, now=now)


@router.get("/servers/{server_id}/drain")
async def confirm_drain(
    request: Request, server_id: str, console: ConsoleDep, session: AdminSessionDep, servers: ServerRegistryDep
) -> Response:
    info = await servers.get(server_id)
    if info is None:
        raise ConsoleRefusal(404, f"no server {echoed(server_id)} in the fleet")
    return console.pages.render(request, "drain.html", session, server=info)


@router.post("/servers/{server_id}/drain")
async def drain(
    request: Request,
    server_id: str,
    session: AdminSessionDep,
    servers: ServerRegistryDep,
    csrf: Annotated[str | None, Form()] = None,
) -> RedirectResponse:
    check_csrf(request, session, csrf)
    if not await servers.request_drain(server_id, time.time()):
        raise ConsoleRefusal(404, f"no server {echoed(server_id)} in the fleet")
    return RedirectResponse("/console/fleet", status_code=303)
