"""until_reachable: an end-of-request write tried again while Redis cannot be reached, and
only then."""

from __future__ import annotations

import pytest
import redis

from serving.redis_retry import until_reachable


class _Flaky:
    """Fails with `error` for the first `failures` calls, then answers how many calls it took."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.calls = 0
        self._failures = failures
        self._error = error

    async def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self._failures:
            raise self._error
        return self.calls


async def test_unreachable_redis_is_tried_again_until_it_answers() -> None:
    for error in (redis.ConnectionError("refused"), redis.TimeoutError("timed out")):
        write = _Flaky(3, error)
        assert await until_reachable(write, what="the final record", retry_s=10) == 4


async def test_other_errors_are_not_retried() -> None:
    write = _Flaky(1, redis.ResponseError("WRONGTYPE"))
    with pytest.raises(redis.ResponseError):
        await until_reachable(write, what="usage", retry_s=10)
    assert write.calls == 1


async def test_after_retry_s_the_last_error_is_raised() -> None:
    write = _Flaky(1000, redis.ConnectionError("still down"))
    with pytest.raises(redis.ConnectionError):
        await until_reachable(write, what="usage", retry_s=0.3)
    assert write.calls < 10  # it gave up (waits of 0.1 s, 0.2 s, ... until the deadline)
