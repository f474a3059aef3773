"""Whose an API key is, remembered for a moment: the one resolver of keys for every door.

    Authorization: Bearer KEY ── admin key?            ──▶ EdgeCaller(admin)       (no Redis)
    (HTTP header, gRPC metadata) cached < key_cache_s? ──▶ the cached answer
                               ── KeyStore.resolve     ──▶ EdgeCaller(team) | None (one HGET)

The key arrives parsed by gateway/auth.py's `bearer_key`, the one parser of the header. The
HTTP edge, the HTTP routes (gateway/auth.py) and the gRPC door all resolve through one
`KeyCache` per worker process, so a key costs one HGET per `key_cache_s` per process however
many requests it sends, and a revoked key is refused on both doors within `key_cache_s`
(2 s by default). Answers, unknown keys included, are kept at most `max_entries`, oldest
dropped first, so a flood of made-up keys costs one HGET each and bounded memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from quota.keys import KeyStore, hash_key

MAX_CACHED_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class EdgeCaller:
    """A caller the edge let through: `key_id` (the key's hash) counts its requests, against
    its team's share of streams (`team_id`; None for the admin key)."""

    key_id: str
    is_admin: bool
    team_id: str | None = None


class KeyCache:
    """Resolves keys against a `KeyStore`, remembering each answer for `ttl_s`."""

    def __init__(
        self,
        store: KeyStore,
        ttl_s: float,
        max_entries: int = MAX_CACHED_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._answers: dict[str, tuple[float, EdgeCaller | None]] = {}

    async def caller(self, key: str) -> EdgeCaller | None:
        """The caller `key` belongs to; None for an unknown or revoked key. Raises Redis's
        errors (the edge answers 503)."""
        key_id = hash_key(key)
        if self.store.is_admin(key):
            return EdgeCaller(key_id, is_admin=True)
        now = self._clock()
        cached = self._answers.get(key_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        team_id = await self.store.resolve(key)
        answer = None if team_id is None else EdgeCaller(key_id, is_admin=False, team_id=team_id)
        self._remember(key_id, now + self._ttl_s, answer)
        return answer

    async def revoke(self, key_hash: str) -> bool:
        """Revoke a key (`KeyStore.revoke`) and forget this process's answer for it at once;
        the other processes' answers lapse within `key_cache_s`. False if no such key."""
        found = await self.store.revoke(key_hash)
        self._answers.pop(key_hash.lower(), None)
        return found

    def _remember(self, key_id: str, until: float, answer: EdgeCaller | None) -> None:
        if self._ttl_s <= 0:
            return
        self._answers.pop(key_id, None)
        while len(self._answers) >= self._max_entries:
            del self._answers[next(iter(self._answers))]  # the oldest answer
        self._answers[key_id] = (until, answer)
