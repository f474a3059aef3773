"""API keys: made once, stored only as hashes, resolved to a team on every request.

    switchyard keys create dev  ──▶  "sy-Qm9v..." printed once
                                     HSET sy:keys <sha256 hex> dev        (Redis)
    Authorization: Bearer sy-Qm9v... ──▶ sha256 ──▶ HGET sy:keys ──▶ "dev"

A key is 32 random bytes, so its SHA-256 needs no salt or slow hash: nobody can guess a key
from its hash, and the lookup is one O(1) HGET. Teams may also list static hashes in
`switchyard.yaml` (`api_key_hashes`), which resolve without Redis. A key whose team has since
left `switchyard.yaml` resolves to nothing.

`KeyStore` is the gateway's (redis.asyncio); `SyncKeyStore` is the same over the blocking
client, for the CLI and `make up`, which have no event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

import redis
import redis.asyncio

from config.settings import TeamSpec
from contracts.caller_echo import echoed

KEYS_HASH = "sy:keys"  # Redis hash: sha256 hex of a key -> team id
KEY_PREFIX = "sy-"


class UnknownTeam(ValueError):
    """A key was asked for a team that `switchyard.yaml` does not configure."""

    def __init__(self, team_id: str, known: list[str]) -> None:
        configured = ", ".join(known) or "none"
        super().__init__(f"unknown team {echoed(team_id)}; teams in switchyard.yaml: {configured}")
        self.team_id = team_id


def generate_key() -> str:
    """A new API key: `sy-` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The hex SHA-256 of `key`: the only form in which a key is stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def matches_hash(key: str, key_hash: str) -> bool:
    """Whether `key` hashes to `key_hash`, compared in constant time."""
    return hmac.compare_digest(hash_key(key), key_hash.lower())


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One known key, as `switchyard keys list` shows it (never the key itself)."""

    key_hash: str
    team_id: str
    source: str  # "redis" (made by `keys create`) or "config" (api_key_hashes)


class _KeyIndex:
    """What both stores share: the configured teams, their static hashes and the admin hash."""

    def __init__(self, teams: Mapping[str, TeamSpec], admin_key_hash: str | None = None) -> None:
        self.teams = dict(teams)
        self._static = {h.lower(): team_id for team_id, spec in teams.items() for h in spec.api_key_hashes}
        self._admin_key_hash = admin_key_hash

    def check_team(self, team_id: str) -> None:
        if team_id not in self.teams:
            raise UnknownTeam(team_id, sorted(self.teams))

    def is_admin(self, key: str) -> bool:
        """Whether `key` is the admin key (constant-time compare of the hashes)."""
        return self._admin_key_hash is not None and matches_hash(key, self._admin_key_hash)

    def is_admin_hash(self, key_hash: str) -> bool:
        """Whether `key_hash` is the admin key's hash (a console session keeps only the hash)."""
        return self._admin_key_hash is not None and hmac.compare_digest(key_hash.lower(), self._admin_key_hash.lower())

    def _static_team(self, key_hash: str) -> str | None:
        return self._static.get(key_hash)

    def _configured(self, team_id: str | bytes | None) -> str | None:
        if team_id is None:
            return None
        team = team_id.decode() if isinstance(team_id, bytes) else team_id
        return team if team in self.teams else None

    def _entries(self, stored: Mapping[bytes | str, bytes | str]) -> list[KeyEntry]:
        entries = [KeyEntry(h, team, "config") for h, team in self._static.items()]
        for raw_hash, raw_team in stored.items():
            key_hash = raw_hash.decode() if isinstance(raw_hash, bytes) else raw_hash
            team = raw_team.decode() if isinstance(raw_team, bytes) else raw_team
            entries.append(KeyEntry(key_hash, team, "redis"))
        return sorted(entries, key=lambda e: (e.team_id, e.key_hash))


class KeyStore(_KeyIndex):
    """API keys over redis.asyncio, for the gateway."""

    def __init__(
        self, client: redis.asyncio.Redis, teams: Mapping[str, TeamSpec], admin_key_hash: str | None = None
    ) -> None:
        super().__init__(teams, admin_key_hash)
        self._redis = client

    async def create(self, team_id: str) -> str:
        """A new key for `team_id`; only its hash is stored, so this is the one time it is seen."""
        self.check_team(team_id)
        key = generate_key()
        await self._redis.hset(KEYS_HASH, hash_key(key), team_id)
        return key

    async def revoke(self, key_hash: str) -> bool:
        """Forget a key made by `create`; False if no such key. Static hashes live in the file."""
        return bool(await self._redis.hdel(KEYS_HASH, key_hash.lower()))

    async def resolve(self, key: str) -> str | None:
        """The team `key` belongs to, or None when it is unknown (or its team is gone)."""
        key_hash = hash_key(key)
        static = self._static_team(key_hash)
        if static is not None:
            return self._configured(static)
        return self._configured(await self._redis.hget(KEYS_HASH, key_hash))

    async def resolve_hash(self, key_hash: str) -> str | None:
        """As `resolve`, for a key known only by its hash (a console session: a revoked key
        ends its sessions at their next page)."""
        key_hash = key_hash.lower()
        static = self._static_team(key_hash)
        if static is not None:
            return self._configured(static)
        return self._configured(await self._redis.hget(KEYS_HASH, key_hash))

    async def list(self) -> list[KeyEntry]:
        return self._entries(await self._redis.hgetall(KEYS_HASH))


class SyncKeyStore(_KeyIndex):
    """The same store over the blocking client, for the CLI and `make up`."""

    def __init__(self, client: redis.Redis, teams: Mapping[str, TeamSpec], admin_key_hash: str | None = None) -> None:
        super().__init__(teams, admin_key_hash)
        self._redis = client

    def create(self, team_id: str) -> str:
        self.check_team(team_id)
        key = generate_key()
        self._redis.hset(KEYS_HASH, hash_key(key), team_id)
        return key

    def revoke(self, key_hash: str) -> bool:
        return bool(self._redis.hdel(KEYS_HASH, key_hash.lower()))

    def resolve(self, key: str) -> str | None:
        key_hash = hash_key(key)
        static = self._static_team(key_hash)
        if static is not None:
            return self._configured(static)
        stored = self._redis.hget(KEYS_HASH, key_hash)
        return self._configured(stored)

    def list(self) -> list[KeyEntry]:
        stored = self._redis.hgetall(KEYS_HASH)
        return self._entries(stored)
