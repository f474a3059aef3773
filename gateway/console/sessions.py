"""Console sessions: a random id in a cookie, the session itself in Redis with a TTL.

    POST /console/signin  key ──▶ KeyStore: the admin key, or a team's key?
                                  ──▶ HSET sy:console:session:{sha256(id)} team admin key_hash csrf
                                      EXPIRE ttl_s
                                  ──▶ Set-Cookie: sy_console=<id>; HttpOnly; SameSite=Strict;
                                      Path=/console; Max-Age=ttl_s; Secure when the request came
                                      over TLS (its scheme, or X-Forwarded-Proto: https)
    any console page      cookie ──▶ HGETALL the session ──▶ its key still valid? (one HGET)

Why a server-side id rather than a signed cookie: the key never leaves the sign-in request (the
session keeps only the key's hash, to notice a revoked key), sign-out and revocation end a
session at once, and there is no signing secret to make, rotate or leak. Redis stores the
hash of the id, so reading Redis does not hand out live sessions. Each session carries its own
CSRF token for the console's forms. A session lives `ttl_s` from sign-in, however busy.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from quota.keys import KeyStore, hash_key

COOKIE_NAME = "sy_console"
COOKIE_PATH = "/console"
SESSION_TTL_S = 8 * 3600  # a working day; then sign in again
MAX_KEY_CHARS = 256  # longer than any key (`sy-` and 43 characters); refused unread beyond
_ID_BYTES = 32


def session_key(session_id: str, prefix: str = "sy:") -> str:
    """Where a session lives: under the SHA-256 of its id, never the id itself."""
    return f"{prefix}console:session:{hashlib.sha256(session_id.encode()).hexdigest()}"


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One signed-in person: a team's (team_id set) or the operator's (is_admin)."""

    session_id: str
    team_id: str | None
    is_admin: bool
    csrf_token: str
    key_hash: str

    @property
    def who(self) -> str:
        return "operator (admin key)" if self.is_admin else f"team {self.team_id}"


class SessionStore:
    """Sessions in Redis, checked against the same `KeyStore` as the API's keys."""

    def __init__(
        self, client: redis.asyncio.Redis, keys: KeyStore, ttl_s: int = SESSION_TTL_S, prefix: str = "sy:"
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self._redis = client
        self._keys = keys
        self.ttl_s = ttl_s
        self._prefix = prefix

    async def sign_in(self, key: str) -> ConsoleSession | None:
        """A new session for `key`; None when it is not the admin key nor a team's valid key.
        Raises Redis's errors (the caller answers 503)."""
        key = key.strip()
        if not key or len(key) > MAX_KEY_CHARS:
            return None
        key_hash = hash_key(key)
        if self._keys.is_admin(key):
            team_id, is_admin = None, True
        else:
            team_id, is_admin = await self._keys.resolve(key), False
            if team_id is None:
                return None
        session = ConsoleSession(
            secrets.token_urlsafe(_ID_BYTES), team_id, is_admin, secrets.token_urlsafe(24), key_hash
        )
        fields: dict[Any, Any] = {
            "team": team_id or "",
            "admin": int(is_admin),
            "csrf": session.csrf_token,
            "key_hash": key_hash,
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(session_key(session.session_id, self._prefix), mapping=fields)
            pipe.expire(session_key(session.session_id, self._prefix), self.ttl_s)
            await pipe.execute()
        return session

    async def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie's id; None when there is none, it expired, or its key
        has since been revoked (then the session is ended too)."""
        if not session_id or len(session_id) > 2 * _ID_BYTES:
            return None
        raw = await self._redis.hgetall(session_key(session_id, self._prefix))
        if not raw:
            return None
        values = {_text(k): _text(v) for k, v in raw.items()}
        session = ConsoleSession(
            session_id, values.get("team") or None, values.get("admin") == "1", values["csrf"], values["key_hash"]
        )
        if not await self._still_valid(session):
            await self.sign_out(session_id)
            return None
        return session

    async def sign_out(self, session_id: str) -> None:
        await self._redis.delete(session_key(session_id, self._prefix))

    async def _still_valid(self, session: ConsoleSession) -> bool:
        if session.is_admin:
            return self._keys.is_admin_hash(session.key_hash)
        return session.team_id is not None and await self._keys.resolve_hash(session.key_hash) == session.team_id


def csrf_matches(session: ConsoleSession, token: str | None) -> bool:
    """Whether a form's token is the session's (constant-time)."""
    return token is not None and secrets.compare_digest(token.encode(), session.csrf_token.encode())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
