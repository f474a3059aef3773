"""Who is calling: `Authorization: Bearer KEY` resolved to a team (or the admin) per request.

    missing / not "Bearer KEY"    401 authentication_error  (how to get a key)
    unknown or revoked key        401 authentication_error
    the admin key                 Principal(team_id=None, is_admin=True)
    the admin key + X-Switchyard-Team: T
                                  Principal(team_id=T, is_admin=True, team=<TeamSpec>): a
                                  service (the bulk dispatcher) acting for team T, billed to T
    a team's key                  Principal(team_id="dev", is_admin=False, team=<TeamSpec>)
    a model the team may not use  403 permission_error      (require_model_access)

Routes take `principal: PrincipalDep` (or `AdminDep` for admin routes). Keys resolve through
the worker's one `KeyCache` (gateway/edge_keys.py: a key is looked up in Redis at most once per
`gateway.key_cache_s`), in `app.state.key_cache`, put there by `install_auth` from the lifespan.

`bearer_key` is the one parser of the header: the route's check here, the edge's
(gateway/edge_guard.py) and the gRPC door's metadata (gateway/grpc_door/service.py) refuse a
missing or malformed header with the same 401.
"""

from __future__ import annotations

from typing import Annotated

import redis
from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from contracts.caller_echo import echoed
from contracts.errors import ApiError
from contracts.schemas import TEAM_HEADER
from gateway.edge_keys import KeyCache
from serving.principal import Principal, forbidden

KEY_CACHE_STATE = "key_cache"  # app.state.key_cache: the KeyCache every request resolves through
_HOW_TO_GET_A_KEY = "an operator makes one with `switchyard keys create TEAM`"
_CHALLENGE = {"WWW-Authenticate": "Bearer"}

# Declares the scheme in the OpenAPI document (the docs' "Authorize" button); the header is
# parsed below so that a missing and a malformed header get different messages.
_bearer_scheme = HTTPBearer(auto_error=False, description="An API key: `switchyard keys create TEAM`.")


def install_auth(app: FastAPI, keys: KeyCache) -> None:
    """Make `keys` the one `PrincipalDep` resolves through (call from the lifespan)."""
    setattr(app.state, KEY_CACHE_STATE, keys)


async def get_key_cache(request: Request) -> KeyCache:
    keys = getattr(request.app.state, KEY_CACHE_STATE, None)
    if not isinstance(keys, KeyCache):
        raise RuntimeError("no key cache: call gateway.auth.install_auth(app, keys) in the lifespan")
    return keys


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "authentication_error", message, None, _CHALLENGE)


def unknown_key() -> ApiError:
    """401 for a well-formed key no team holds (never made, or revoked)."""
    return unauthorized(f"the API key is not valid (unknown or revoked); {_HOW_TO_GET_A_KEY}")


def keys_unavailable() -> ApiError:
    """503 when Redis cannot say whose a key is: the caller retries, no key is judged."""
    return ApiError(
        503, "service_unavailable", "cannot check API keys right now; retry shortly", None, {"Retry-After": "1"}
    )


def bearer_key(header: str | None) -> str:
    """The key of an `Authorization: Bearer KEY` header (the scheme in any case, spaces around
    the key allowed); `unauthorized` when the header is missing or not of that form."""
    if header is None or not header.strip():
        raise unauthorized(f"send an API key as 'Authorization: Bearer KEY'; {_HOW_TO_GET_A_KEY}")
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or " " in key:
        raise unauthorized(
            f"the Authorization header must be 'Bearer KEY' (got scheme {echoed(scheme)}); {_HOW_TO_GET_A_KEY}"
        )
    return key


async def get_principal(
    request: Request,
    keys: Annotated[KeyCache, Depends(get_key_cache)],
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> Principal:
    """Resolve the request's bearer key; 401 unless it names a configured team or the admin."""
    key = bearer_key(request.headers.get("authorization"))
    return await resolve_principal(keys, key, request.headers.get(TEAM_HEADER))


async def resolve_principal(keys: KeyCache, key: str, acting_for: str | None) -> Principal:
    """The caller `key` (from `bearer_key`) and, for the admin, `X-Switchyard-Team` name;
    `ApiError` 401 / 403 / 503 otherwise. Every door (HTTP, gRPC metadata) resolves through here."""
    store = keys.store
    if store.is_admin(key):
        if acting_for is None:
            return Principal(team_id=None, is_admin=True)
        if acting_for not in store.teams:
            raise forbidden(f"header {TEAM_HEADER} names unknown team {echoed(acting_for)}", TEAM_HEADER)
        return Principal(team_id=acting_for, is_admin=True, team=store.teams[acting_for])
    try:
        caller = await keys.caller(key)
    except redis.RedisError:
        raise keys_unavailable() from None
    if caller is None or caller.team_id is None:
        raise unknown_key()
    return Principal(team_id=caller.team_id, is_admin=False, team=store.teams[caller.team_id])


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The principal, if it is the admin; 403 for a team's key."""
    if not principal.is_admin:
        raise forbidden("this route needs the admin key (var/admin-api-key or SWITCHYARD_ADMIN_KEY)")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]
