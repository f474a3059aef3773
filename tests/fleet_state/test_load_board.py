"""The load board: reports round-trip through a real redis-server, silence is noticed on the
reader's own clock, and pool capacity is summed from what servers publish."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import httpx
import pytest
import redis.asyncio as aioredis

from contracts.engine_metrics import EngineHealth
from fleet_state.load_board import Freshness, LoadBoard, LoadReport
from quota.capacity import BoardCapacity, CapacityMonitor

pytestmark = pytest.mark.integration

T0 = 1_764_650_000.0
HEALTH = EngineHealth(T0 - 0.02, 80_000, 61_440, 3, 1, 4_096, 2)


@pytest.fixture
async def board(redis_url: str) -> AsyncIterator[LoadBoard]:
    client = aioredis.Redis.from_url(redis_url)
    yield LoadBoard(client)
    await client.aclose()


def test_a_report_reads_back_as_written() -> None:
    for report in (
        LoadReport("small-0", 17, T0, True, HEALTH),
        LoadReport("small-0", 18, T0, False, None),
        LoadReport("small-0", 19, T0, True, EngineHealth(None, 0, 0, 0, 0)),
        LoadReport("small-0", 20, T0, False, None, refused=True),
    ):
        assert LoadReport.decode("small-0", report.encode()) == report
    assert LoadReport("s", 17, T0, True, HEALTH).encode() == "17,1764650000.000,1,1764649999.980,80000,61440,3,1,4096,2"
    for garbage in ("", "x", "1,2", "1,nan,1,-", "1,2,1,3,4", "1,2,1,inf,1,1,1,1,1,1"):
        assert LoadReport.decode("s", garbage) is None


async def test_pools_are_read_whole_in_one_round_trip(board: LoadBoard) -> None:
    await board.publish("small", LoadReport("small-0", 1, T0, True, HEALTH))
    await board.publish("small", LoadReport("small-1", 5, T0, True, None))
    await board.publish("large", LoadReport("large-0", 2, T0, False, HEALTH))
    read = await board.read(["small", "large", "none"])
    assert set(read["small"]) == {"small-0", "small-1"} and read["small"]["small-1"].health is None
    assert read["large"]["large-0"].ready is False
    assert read["none"] == {}
    await board.remove("small", "small-1")
    assert set((await board.read(["small"]))["small"]) == {"small-0"}


def test_a_report_whose_seq_stops_is_stale_after_dead_after_s() -> None:
    freshness = Freshness(dead_after_s=2.0)
    first = LoadReport("a", 1, T0, True, HEALTH)
    assert freshness.fresh(first, now=100.0)
    assert freshness.fresh(first, now=101.9)
    assert not freshness.fresh(first, now=102.1)  # the same seq for 2 s: its publisher is gone
    assert freshness.fresh(LoadReport("a", 2, T0, True, HEALTH), now=102.2)  # back
    freshness.forget_all_but([])
    assert freshness.fresh(first, now=500.0)  # forgotten: seen anew


class NoScrapes:
    """The configured-servers fallback, counting how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    def urls(self) -> Mapping[str, Sequence[str]]:
        self.calls += 1
        return {"small": [], "large": []}


async def test_capacity_sums_the_fresh_ready_servers_and_falls_back_for_silent_pools(board: LoadBoard) -> None:
    scrapes = NoScrapes()
    clock = [100.0]
    async with httpx.AsyncClient() as http:
        capacity = BoardCapacity(
            board, ["small", "large"], CapacityMonitor(scrapes.urls, http, 1.0),
            dead_after_s=2.0, refresh_s=1.0, clock=lambda: clock[0],
        )  # fmt: skip
        changed: list[str] = []
        capacity.subscribe(changed.append)
        await board.publish("small", LoadReport("small-0", 1, T0, True, HEALTH))
        await board.publish("small", LoadReport("small-1", 1, T0, True, HEALTH))
        await board.publish("small", LoadReport("small-2", 1, T0, False, HEALTH))  # not ready yet
        await board.publish("small", LoadReport("small-3", 1, T0, True, None))  # unreadable
        pools = await capacity.refresh()
    small = pools["small"]
    assert (small.capacity_tokens, small.free_tokens, small.interactive_requests) == (160_000, 122_880, 4)
    assert (small.ready_servers, small.servers) == (2, 4)
    assert pools["large"].capacity_tokens == 0 and scrapes.calls == 1  # nothing publishes: scraped
    assert changed == ["small"]
    clock[0] = 103.0  # nobody published since: every report stale
    assert (await capacity.refresh())["small"].capacity_tokens == 0
