"""Console sign-in on the real app (real Redis): the session cookie's flags, what Redis keeps,
CSRF and cross-site refusals, sign-out, and a revoked key ending its sessions."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import redis
from fastapi import FastAPI

from gateway.console.sessions import COOKIE_NAME, session_key
from gateway.console.signin_routes import safe_next


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process as a browser sees it: no key header, cookies kept."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield http


async def sign_in(browser: httpx.AsyncClient, key: str, **headers: str) -> httpx.Response:
    return await browser.post("/console/signin", data={"key": key, "next": "/console/usage"}, headers=headers)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


async def test_a_team_key_signs_in_with_a_strict_httponly_expiring_cookie(
    browser: httpx.AsyncClient, team_key: str, redis_url: str
) -> None:
    reply = await sign_in(browser, team_key)
    assert reply.status_code == 303 and reply.headers["location"] == "/console/usage"
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert "Max-Age=28800" in cookie and "Secure" not in cookie  # plain HTTP here
    session_id = browser.cookies[COOKIE_NAME]
    assert team_key not in cookie and session_id != team_key
    with redis.Redis.from_url(redis_url) as admin:
        stored = admin.hgetall(session_key(session_id))
        assert stored[b"team"] == b"alpha" and team_key.encode() not in b"".join(stored.values())
        assert 0 < admin.ttl(session_key(session_id)) <= 28800
        assert not admin.exists(f"sy:console:session:{session_id}")  # only the id's hash names it
    page = await browser.get("/console/usage")
    assert page.status_code == 200 and "team alpha" in page.text


async def test_the_cookie_is_secure_behind_tls(browser: httpx.AsyncClient, team_key: str) -> None:
    reply = await sign_in(browser, team_key, **{"X-Forwarded-Proto": "https"})
    assert reply.status_code == 303 and "Secure" in reply.headers["set-cookie"]


async def test_a_wrong_key_is_a_401_page_and_no_cookie(browser: httpx.AsyncClient) -> None:
    reply = await sign_in(browser, "sy-not-a-real-key")
    assert reply.status_code == 401 and "not valid" in reply.text
    assert "set-cookie" not in reply.headers
    huge = await sign_in(browser, "x" * 5000)
    assert huge.status_code == 400  # bounded before it is hashed or looked up


async def test_pages_without_a_session_send_you_to_sign_in(browser: httpx.AsyncClient) -> None:
    reply = await browser.get("/console/batches?x=1")
    assert reply.status_code == 303
    assert reply.headers["location"] == "/console/signin?next=%2Fconsole%2Fbatches%3Fx%3D1"
    script = await browser.get("/console/batches/rows", headers={"X-Console": "script"})
    assert script.status_code == 401 and script.json()["error"]["type"] == "authentication_error"


async def test_a_cross_site_sign_in_is_refused(browser: httpx.AsyncClient, team_key: str) -> None:
    reply = await sign_in(browser, team_key, Origin="https://evil.example")
    assert reply.status_code == 403 and COOKIE_NAME not in browser.cookies
    reply = await sign_in(browser, team_key, **{"Sec-Fetch-Site": "cross-site"})
    assert reply.status_code == 403 and COOKIE_NAME not in browser.cookies


async def test_sign_out_needs_the_session_token_and_ends_the_session(
    browser: httpx.AsyncClient, team_key: str, redis_url: str
) -> None:
    await sign_in(browser, team_key)
    session_id = browser.cookies[COOKIE_NAME]
    page = await browser.get("/console/usage")
    forged = await browser.post("/console/signout", data={"csrf": "guessed"})
    assert forged.status_code == 403
    reply = await browser.post("/console/signout", data={"csrf": csrf_of(page.text)})
    assert reply.status_code == 303 and reply.headers["location"] == "/console/signin"
    assert f'{COOKIE_NAME}=""' in reply.headers["set-cookie"] and "Max-Age=0" in reply.headers["set-cookie"]
    with redis.Redis.from_url(redis_url) as admin:
        assert not admin.exists(session_key(session_id))
    browser.cookies.set(COOKIE_NAME, session_id)  # the old cookie, replayed
    assert (await browser.get("/console/usage")).status_code == 303


async def test_a_revoked_key_ends_its_console_sessions(
    browser: httpx.AsyncClient, make_key: Callable[[str], str], redis_url: str
) -> None:
    key = make_key("alpha")
    await sign_in(browser, key)
    assert (await browser.get("/console/usage")).status_code == 200
    with redis.Redis.from_url(redis_url) as admin:
        from quota.keys import KEYS_HASH, hash_key

        assert admin.hdel(KEYS_HASH, hash_key(key)) == 1
    assert (await browser.get("/console/usage")).status_code == 303


def test_after_sign_in_only_console_paths() -> None:
    assert safe_next("/console/batches") == "/console/batches"
    for hostile in ("//evil.example/console", "https://evil.example", "/v1/usage", "/console\\@evil", None, ""):
        assert safe_next(hostile) == "/console/usage"
