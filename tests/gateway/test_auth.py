"""Bearer keys on a small app that uses the auth dependencies as the gateway's routes do:
401 for a missing, malformed or unknown key, 403 for a model the team may not use, the admin."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio
from fastapi import FastAPI
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from config.settings import TeamSpec
from gateway.auth import AdminDep, PrincipalDep, install_auth
from gateway.edge_keys import KeyCache
from gateway.error_handlers import install_error_handlers
from quota.keys import KeyStore, hash_key
from serving.principal import require_model_access
from tests.auth_headers import bearer

ADMIN_KEY = "sy-admin-key-for-tests"
TEAMS = {"alpha": TeamSpec(), "beta": TeamSpec(models=["small"])}


def build_app(store: KeyStore) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    install_auth(app, KeyCache(store, ttl_s=0))  # no caching: each request asks Redis

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/whoami")
    async def whoami(principal: PrincipalDep) -> dict[str, object]:
        return {"team": principal.team_id, "admin": principal.is_admin}

    @app.post("/v1/use/{model_id}")
    async def use(model_id: str, principal: PrincipalDep) -> dict[str, str]:
        return {"billed": require_model_access(principal, principal.team, model_id)}

    @app.get("/v1/admin")
    async def admin(principal: AdminDep) -> dict[str, bool]:
        return {"admin": principal.is_admin}

    return app


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[KeyStore]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield KeyStore(client, TEAMS, admin_key_hash=hash_key(ADMIN_KEY))
    await client.aclose()


@pytest.fixture
async def http(store: KeyStore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        yield client


async def test_open_routes_need_no_key(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).status_code == 200


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "send an API key as 'Authorization: Bearer KEY'"),
        ({"Authorization": ""}, "send an API key"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "must be 'Bearer KEY' (got scheme 'Basic')"),
        ({"Authorization": "Bearer"}, "must be 'Bearer KEY'"),
        ({"Authorization": "Bearer two words"}, "must be 'Bearer KEY'"),
        ({"Authorization": "Bearer sy-not-a-key"}, "not valid (unknown or revoked)"),
    ],
)
async def test_missing_malformed_or_unknown_key_is_401(
    http: httpx.AsyncClient, headers: dict[str, str], says: str
) -> None:
    reply = await http.get("/v1/whoami", headers=headers)
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    error = reply.json()["error"]
    assert error["type"] == "authentication_error"
    assert says in error["message"]
    assert "switchyard keys create TEAM" in error["message"]


async def test_team_key_resolves_and_revoking_it_locks_out(http: httpx.AsyncClient, store: KeyStore) -> None:
    key = await store.create("alpha")
    reply = await http.get("/v1/whoami", headers={"Authorization": f"bearer  {key} "})
    assert reply.json() == {"team": "alpha", "admin": False}
    await store.revoke(hash_key(key))
    assert (await http.get("/v1/whoami", headers=bearer(key))).status_code == 401


async def test_model_the_team_may_not_use_is_403(http: httpx.AsyncClient, store: KeyStore) -> None:
    beta = await store.create("beta")
    assert (await http.post("/v1/use/small", headers=bearer(beta))).json() == {"billed": "beta"}
    reply = await http.post("/v1/use/large", headers=bearer(beta))
    assert reply.status_code == 403
    assert reply.json()["error"] == {
        "type": "permission_error",
        "message": "team 'beta' may not use model 'large'; its models: small "
        "(an operator lists them under teams.<team>.models in switchyard.yaml)",
        "param": "model",
        "code": "permission_denied",
    }
    alpha = await store.create("alpha")
    assert (await http.post("/v1/use/large", headers=bearer(alpha))).json() == {"billed": "alpha"}


async def test_admin_key_passes_admin_routes_but_bills_no_team(http: httpx.AsyncClient, store: KeyStore) -> None:
    assert (await http.get("/v1/whoami", headers=bearer(ADMIN_KEY))).json() == {"team": None, "admin": True}
    assert (await http.get("/v1/admin", headers=bearer(ADMIN_KEY))).json() == {"admin": True}
    reply = await http.post("/v1/use/small", headers=bearer(ADMIN_KEY))
    assert reply.status_code == 403
    assert "belongs to no team" in reply.json()["error"]["message"]

    team_key = await store.create("alpha")
    reply = await http.get("/v1/admin", headers=bearer(team_key))
    assert reply.status_code == 403
    assert reply.json()["error"]["type"] == "permission_error"


async def test_redis_down_is_503_not_500() -> None:
    dead = redis.asyncio.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    transport = httpx.ASGITransport(app=build_app(KeyStore(dead, TEAMS)))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        reply = await client.get("/v1/whoami", headers=bearer("sy-anything"))
    await dead.aclose()
    assert reply.status_code == 503
    assert reply.headers["retry-after"] == "1"
