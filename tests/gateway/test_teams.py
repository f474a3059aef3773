"""Every /v1 route belongs to a team: 401 without a valid key, 403 for a model the team may not
use, request ids scoped per team, and the team's default class (on the real app, FakeBackend)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.auth_headers import bearer

PROMPT = "the quick brown fox"
BODY: dict[str, Any] = {"model": "small", "prompt": PROMPT, "max_tokens": 3}
CHAT: dict[str, Any] = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}

ROUTES = [
    ("POST", "/v1/generate", BODY),
    ("DELETE", "/v1/generate/r1", None),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/small", None),
    ("POST", "/v1/completions", BODY),
    ("POST", "/v1/chat/completions", CHAT),
    ("GET", "/v1/usage", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize(
    ("headers", "says"),
    [({}, "send an API key"), (bearer("sy-not-a-key"), "not valid (unknown or revoked)")],
)
async def test_every_v1_route_needs_a_valid_key(
    anonymous: httpx.AsyncClient,
    backend: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
    says: str,
) -> None:
    reply = await anonymous.request(method, path, json=body, headers=headers)
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"] == "Bearer"
    assert reply.json()["error"]["type"] == "authentication_error"
    assert says in reply.json()["error"]["message"]
    assert backend.requests == []


async def test_health_and_metrics_need_no_key(anonymous: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await anonymous.get(path)).status_code == 200


@pytest.mark.parametrize("path", ["/v1/generate", "/v1/completions"])
async def test_a_model_the_team_may_not_use_is_403(
    client: httpx.AsyncClient, backend: Any, make_key: Callable[[str], str], path: str
) -> None:
    beta = bearer(make_key("beta"))
    reply = await client.post(path, json={**BODY, "model": "large"}, headers=beta)
    assert reply.status_code == 403
    assert reply.json()["error"]["type"] == "permission_error"
    assert reply.json()["error"]["param"] == "model"
    assert "team 'beta' may not use model 'large'" in reply.json()["error"]["message"]
    assert backend.requests == []
    # Its own model, and alpha on `large`, go through.
    assert (await client.post(path, json=BODY, headers=beta)).status_code == 200
    assert (await client.post(path, json={**BODY, "model": "large"})).status_code == 200
    assert [r.model_id for r in backend.requests] == ["small", "large"]


async def test_an_unknown_model_is_404_before_any_permission_check(
    client: httpx.AsyncClient, make_key: Callable[[str], str]
) -> None:
    reply = await client.post("/v1/generate", json={**BODY, "model": "nope"}, headers=bearer(make_key("beta")))
    assert reply.status_code == 404


async def test_the_admin_key_cannot_generate(client: httpx.AsyncClient, backend: Any, admin_key: str) -> None:
    reply = await client.post("/v1/generate", json=BODY, headers=bearer(admin_key))
    assert reply.status_code == 403
    assert "belongs to no team" in reply.json()["error"]["message"]
    assert backend.requests == []


async def test_two_teams_may_use_the_same_request_id(
    client: httpx.AsyncClient, backend: Any, make_key: Callable[[str], str]
) -> None:
    body = {**BODY, "request_id": "same"}
    alpha = await client.post("/v1/generate", json=body)
    beta = await client.post("/v1/generate", json=body, headers=bearer(make_key("beta")))
    assert alpha.status_code == beta.status_code == 200
    assert alpha.json()["request_id"] == beta.json()["request_id"] == "same"
    assert beta.json()["text"] == "Hello, world"
    assert [(r.request_id, r.cache_namespace) for r in backend.requests] == [
        ("alpha/same", "alpha"),
        ("beta/same", "beta"),
    ]


async def test_without_a_class_the_team_default_applies(
    client: httpx.AsyncClient, backend: Any, make_key: Callable[[str], str]
) -> None:
    beta = bearer(make_key("beta"))  # default_class: bulk
    await client.post("/v1/generate", json=BODY, headers=beta)
    await client.post("/v1/completions", json=BODY, headers=beta)
    await client.post("/v1/generate", json={**BODY, "class": "interactive"}, headers=beta)
    await client.post("/v1/completions", json=BODY, headers={**beta, "X-Switchyard-Class": "interactive"})
    await client.post("/v1/completions", json=BODY)  # alpha: interactive by default
    assert [r.request_class for r in backend.requests] == ["bulk", "bulk", "interactive", "interactive", "interactive"]
