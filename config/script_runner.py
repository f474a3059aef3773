"""How a store runs its Lua scripts: one call at a time (`ReplicaAcks`, config/replica_acks.py)
or coalesced with other callers' into one pipeline (`BatchedScripts`,
config/batched_scripts.py). Stores take either; the gateway's workers pass the batched one."""

from __future__ import annotations

from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript


class ScriptRunner(Protocol):
    async def run(self, client: aioredis.Redis, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """`script`'s reply once it ran on `client` (and, in sentinel mode, a replica holds
        what it wrote)."""
        ...
