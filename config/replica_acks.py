"""Writes a failover must not lose: done, then held by a replica, before they count.

Redis replicates asynchronously: a primary answers a write before its replica has it, so a
primary that dies right after can take the write with it when Sentinel promotes the replica
(docs/redis.md). For most of our state that costs little (a lease lapses, a batch entry is
delivered again); for a request id's claim it would let a repeat generate a second time, and
for usage it would bill less than was served. Those writes are scripts (atomic), run by
`ReplicaAcks.run`:

    one pipeline, not a transaction:  EVALSHA the write          ─┐ one connection,
                                      WAIT replicas timeout_ms   ─┘ one round trip

WAIT counts the replicas that acknowledged this connection's writes, so it must follow them on
the same connection (a pool would hand it another), and inside MULTI it does not block. The
reply then waits for the replica's acknowledgement: well under a millisecond on a local
network, one command more per write.

A write no replica acknowledged within the timeout is not acknowledged to anyone: `run`
raises `NotReplicated` (config/redis_errors.py, a ConnectionError: "Redis unreachable, retry").
It may stand on the primary, but a primary cut off from its replica is the one the sentinels
replace, and what it alone held is dropped when it rejoins as their replica: answering "done"
would be the silent loss this module exists to prevent. The primary itself refuses writes
once its replica has been out of reach for `min-replicas-max-lag` (NOREPLICAS,
stack/redis_server.py); this covers the seconds before that (docs/redis.md). With `replicas`
0 (one Redis, the default outside sentinel mode) a write is just the script, as before.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from config.redis_errors import NotReplicated
from config.redis_settings import RedisSpec

logger = logging.getLogger(__name__)


class ReplicaAcks:
    """Runs a write, then waits for `replicas` replicas to hold it (at most `timeout_ms`)."""

    def __init__(self, replicas: int, timeout_ms: int) -> None:
        if replicas < 0 or timeout_ms < 1:
            raise ValueError(f"replicas must be >= 0 and timeout_ms >= 1, got {replicas} and {timeout_ms}")
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.short_acks = 0  # writes a replica did not acknowledge in time (for tests and logs)

    @classmethod
    def from_settings(cls, spec: RedisSpec) -> ReplicaAcks:
        return cls(spec.acks_required, spec.replica_ack_timeout_ms)

    def waiting(self) -> bool:
        """Whether a write waits for replicas (any configured)."""
        return self.replicas > 0

    def acknowledged(self, acked: int) -> None:
        """Check WAIT's answer: short of `replicas`, raise NotReplicated (the write is not
        durable, so it must not count as done)."""
        if acked >= self.replicas:
            return
        self.short_acks += 1
        logger.warning("a write reached %d of %d replicas within %d ms", acked, self.replicas, self.timeout_ms)
        raise NotReplicated(
            f"a write reached {acked} of {self.replicas} replicas within {self.timeout_ms} ms: not durable, retry"
        )

    async def run(self, client: aioredis.Redis, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """`script`'s reply, once `replicas` replicas hold what it wrote. Raises NotReplicated
        when they did not within `timeout_ms`; a primary that refuses writes answers NOREPLICAS
        (a ResponseError). Both mean "retry" (config/redis_errors.py)."""
        if not self.waiting():
            return await script(keys=keys, args=args, client=client)
        reply, acked = await self._write_and_wait(client, script, [*keys, *args], len(keys))
        self.acknowledged(int(acked))
        return reply

    async def _write_and_wait(
        self, client: aioredis.Redis, script: AsyncScript, words: list[Any], numkeys: int
    ) -> tuple[Any, Any]:
        """(the script's reply, the replicas that acknowledged) from one pipeline. EVALSHA
        alone, not redis-py's pipelined script (which sends SCRIPT EXISTS first, every time):
        a server that does not know the script yet (a new primary) is sent it once."""
        for _ in range(2):
            async with client.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, numkeys, *words)
                pipe.wait(self.replicas, self.timeout_ms)
                reply, acked = await pipe.execute(raise_on_error=False)
            if not isinstance(reply, NoScriptError):
                break
            await client.script_load(script.script)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        return reply, acked
