"""Which Redis errors mean "Redis cannot take this write now: try again", and the one we add.

A write fails transiently in three ways, and every caller that retries (serving/redis_retry.py,
the end-of-request writes; the HTTP edge, which answers 503 with Retry-After) treats them alike:

    ConnectionError, TimeoutError   the connection broke or the reply is late (a restart, a
                                    failover, a link gone quiet); Redis may or may not have run it
    NOREPLICAS (a ResponseError)    the primary has no replica within `min-replicas-max-lag`
                                    (cut off from it: docs/redis.md), so it refuses every write
    READONLY (ReadOnlyError)        a connection still on a primary the sentinels demoted (healed
                                    after a partition); the next connection finds the new one
    NotReplicated (ours)            the write ran on the primary, but no replica acknowledged it
                                    within the WAIT timeout (config/replica_acks.py): it is not
                                    durable, so it is not acknowledged to anyone

redis-py maps error codes it knows to classes (READONLY, LOADING, ...) but not NOREPLICAS: it
arrives as a plain `ResponseError` whose text starts with the code, also from inside a script.
Every write that may meet one of these is safe to send again (each is idempotent: a usage
record counts once by its id, a final record and a release are the same the second time).
"""

from __future__ import annotations

import redis

NO_REPLICAS = "NOREPLICAS"


class NotReplicated(redis.ConnectionError):
    """A write a replica did not acknowledge in time. A ConnectionError: for the caller it is
    "Redis unreachable, retry" (the write may stand on the primary, as after a broken
    connection, and may be lost by a failover: so it must not count as done)."""


def refused_for_replicas(exc: BaseException) -> bool:
    """The primary refused a write because it has too few replicas in reach (NOREPLICAS)."""
    return isinstance(exc, redis.ResponseError) and str(exc).lstrip("-").startswith(NO_REPLICAS)


def redis_unreachable(exc: BaseException) -> bool:
    """`exc` is transient: Redis cannot be reached, or cannot make a write durable, for now."""
    transient = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError)
    return isinstance(exc, transient) or refused_for_replicas(exc)
