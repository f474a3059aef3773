"""The fleet's servers, for operators (the admin key).

GET  /admin/servers                  every registered server: pool, state, ports, heartbeat
POST /admin/servers/{id}/drain       no new work; in-flight replies finish; then it stops
                                     (its supervisor does the rest, as for `switchyard drain`)
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from pydantic import BaseModel

from contracts.caller_echo import echoed
from contracts.errors import ApiError
from contracts.schemas import error_responses
from fleet_state.registry import ServerInfo
from gateway.auth import AdminDep
from gateway.deps import ServerRegistryDep

router = APIRouter(prefix="/admin/servers", tags=["admin"])


class ServerBody(BaseModel):
    server_id: str
    pool_id: str
    state: str
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    pid: int | None
    started_at: float
    heartbeat_at: float


class ServerList(BaseModel):
    object: str = "list"
    data: list[ServerBody]


def _body(info: ServerInfo) -> ServerBody:
    return ServerBody(
        server_id=info.server_id, pool_id=info.pool_id, state=info.state.value, host=info.host,
        http_port=info.http_port, grpc_port=info.grpc_port, metrics_port=info.metrics_port, pid=info.pid,
        started_at=info.started_at, heartbeat_at=info.heartbeat_at,
    )  # fmt: skip


@router.get("", response_model=ServerList, responses=error_responses(401, 403))
async def list_servers(servers: ServerRegistryDep, _: AdminDep) -> ServerList:
    return ServerList(data=[_body(info) for info in await servers.servers()])


@router.post("/{server_id}/drain", response_model=ServerBody, status_code=202, responses=error_responses(403, 404))
async def drain_server(server_id: str, servers: ServerRegistryDep, _: AdminDep) -> ServerBody:
    """Drain a server: the gateways stop routing to it at once; its replies finish; then its
    supervisor stops it and it leaves the registry (it is not restarted)."""
    if not await servers.request_drain(server_id, time.time()):
        message = f"no server {echoed(server_id)} (GET /admin/servers lists them)"
        raise ApiError(404, "not_found_error", message, "server_id")
    info = await servers.get(server_id)
    if info is None:  # drained and gone already
        raise ApiError(404, "not_found_error", f"server {echoed(server_id)} has left the fleet", "server_id")
    return _body(info)
