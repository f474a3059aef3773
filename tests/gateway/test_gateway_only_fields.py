"""Fields only the gateway sets on the way to `llm` (the prefix-cache namespace, the request id a
cancel names, the team) never come from a team's request: a body that names them is refused
before anything reaches a server, and what does reach one carries the caller's own team.

(Triton itself takes inference only from the gateway: tests/integration/test_triton_access.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

GATEWAY_ONLY = {
    "cache_namespace": "beta",  # would probe beta's prefix cache through cached_tokens
    "cancel_request_id": "beta/their-request",  # would cancel beta's reply
    "team": "beta",
    "team_id": "beta",
}
ROUTES = {
    "/v1/generate": {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3},
    "/v1/completions": {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3},
    "/v1/chat/completions": {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
}


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("field", sorted(GATEWAY_ONLY))
async def test_a_gateway_only_field_in_a_request_is_refused(
    client: httpx.AsyncClient, backend: Any, route: str, field: str
) -> None:
    response = await client.post(route, json={**ROUTES[route], field: GATEWAY_ONLY[field]})
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]
    assert backend.requests == []  # nothing reached a server


@pytest.mark.parametrize("route", ["/v1/generate", "/v1/completions"])  # chat: the test model has no template
async def test_the_namespace_and_request_id_are_the_callers_own_team(
    client: httpx.AsyncClient, backend: Any, make_key: Callable[[str], str], route: str
) -> None:
    beta = {"Authorization": f"Bearer {make_key('beta')}"}
    assert (await client.post(route, json=ROUTES[route])).status_code == 200
    assert (await client.post(route, json=ROUTES[route], headers=beta)).status_code == 200
    alpha_request, beta_request = backend.requests
    assert (alpha_request.cache_namespace, beta_request.cache_namespace) == ("alpha", "beta")
    assert alpha_request.request_id.startswith("alpha/") and beta_request.request_id.startswith("beta/")
