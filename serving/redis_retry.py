"""The writes at a request's end, tried again while Redis cannot be reached.

A reply that has been served must still be billed, its request id marked done and its lease
given back, even when it ended while Redis restarted or failed over (seconds): once, the
usage write alone was retried, and the chaos run's failover fault showed a lost final record
leaving its id claimed until the owner key lapsed, to be generated again by a repeat. Each of
these writes is safe to send twice (usage counts a record id once, the final record and the
release are idempotent), so a connection that broke after Redis ran one costs nothing.

    await until_reachable(lambda: store.record_final(...), what="the final record", retry_s=30)

"Cannot be reached" includes a primary that refuses writes because it lost its replica
(NOREPLICAS) and a write no replica acknowledged (`NotReplicated`): config/redis_errors.py.
Other Redis errors are not retried: they will not go away by waiting.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis

from config.redis_errors import redis_unreachable

T = TypeVar("T")

logger = logging.getLogger(__name__)

# How long an end-of-request write is retried while Redis cannot be reached (a restart or a
# failover takes seconds).
UNREACHABLE_RETRY_S = 30.0
_FIRST_DELAY_S = 0.1
_MAX_DELAY_S = 2.0


async def until_reachable(
    write: Callable[[], Awaitable[T]],
    *,
    what: str,
    retry_s: float = UNREACHABLE_RETRY_S,
    extra: dict[str, str] | None = None,
) -> T:
    """`write()`'s result; while it fails because Redis cannot be reached, `write()` again,
    backing off from 0.1 s to 2 s (each wait jittered to half of it or more), for up to
    `retry_s`. Raises the last error after that."""
    deadline, delay = time.monotonic() + retry_s, _FIRST_DELAY_S
    while True:
        try:
            return await write()
        except redis.RedisError as exc:
            if not redis_unreachable(exc) or time.monotonic() + delay > deadline:
                raise
            logger.warning("%s not written yet (redis unreachable): retrying", what, extra=extra)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # jittered: ends at once retry apart
            delay = min(2 * delay, _MAX_DELAY_S)
