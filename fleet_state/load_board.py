"""Each server's load, published by the server itself, read by every process that needs it.

    switchyard triton (one per server) ──every fleet.load_publish_s──▶ HSET sy:load:{pool} {server} "<report>"
    gateway workers, the dispatcher ──────────────────────────────────▶ HGETALL sy:load:{pool}

A server's metrics are read once, by the process that owns it on its own host, however many
gateway workers route by them: what gathering load costs grows with the servers, not with
servers × readers. A reader costs Redis one HGETALL per pool per refresh.

A report is a short comma-separated line (cheap to write at 10 Hz and to parse 400 at a time):

    seq, sampled_at, ready, heartbeat, capacity, free, active, waiting, bulk, interactive
    17,1764650000.123,1,1764650000.101,80000,61440,3,0,4096,2
    18,1764650000.223,0,-                      metrics unreadable (still loading, or sick)
    19,1764650000.323,x,-                      nothing listens: the server is gone

`seq` counts the publisher's reports: a reader that sees it stop advancing for `dead_after_s`
(on its own clock) knows the publisher is gone, even where clocks disagree. `sampled_at` (the
publisher's clock) says how old the view is where clocks agree (NTP), which is what routing's
staleness is measured by.

A report may carry its server's registration epoch: it is then written only while no newer
registration holds the id (fleet_state/epochs.py), so a server replaced while it was cut off
cannot overwrite its replacement's load when its link comes back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from contracts.engine_metrics import EngineHealth
from fleet_state.epochs import FENCE_CHECK, Fenced, epoch_key

_UNREADABLE = "-"
# Per server: the text of its load numbers last read, and the numbers (LoadReport.decode).
KnownNumbers = dict[str, tuple[str, tuple[int, ...]]]


# KEYS[1] the board, KEYS[2] the server's epoch counter; ARGV: server id, report, epoch. -1: fenced.
_PUBLISH_FENCED = (
    FENCE_CHECK
    + """
if fenced(KEYS[2], ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
)


def board_key(pool_id: str, prefix: str = "sy:") -> str:
    return f"{prefix}load:{pool_id}"


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One server's load as it last published it."""

    server_id: str
    seq: int
    sampled_at: float
    ready: bool  # Triton's /v2/health/ready answered 200
    health: EngineHealth | None  # None: the metrics could not be read
    refused: bool = False  # nothing listens on its HTTP port: gone, not slow (dead at once)

    def encode(self) -> str:
        head = f"{self.seq},{self.sampled_at:.3f},{'x' if self.refused else int(self.ready)}"
        health = self.health
        if health is None:
            return f"{head},{_UNREADABLE}"
        beat = "" if health.heartbeat is None else f"{health.heartbeat:.3f}"
        return (
            f"{head},{beat},{health.capacity_tokens},{health.free_tokens},"
            f"{health.active},{health.waiting},{health.bulk_tokens},{health.interactive_requests}"
        )

    @classmethod
    def decode(
        cls, server_id: str, raw: str, known: dict[str, tuple[str, tuple[int, ...]]] | None = None
    ) -> LoadReport | None:
        """None for a line this version cannot read (a reader skips that server). `known`: the
        numbers last read per server, by their text; a reader that passes it parses only the
        servers whose load changed (an idle fleet's reports differ in seq and times alone)."""
        fields = raw.split(",", 4)
        try:
            seq, sampled_at, ready, refused = int(fields[0]), float(fields[1]), fields[2] == "1", fields[2] == "x"
            if not math.isfinite(sampled_at):
                return None
            if fields[3] == _UNREADABLE:
                return cls(server_id, seq, sampled_at, ready, None, refused)
            beat = float(fields[3]) if fields[3] else None
            numbers = _numbers(server_id, fields[4], known)
        except (IndexError, ValueError):
            return None
        if beat is not None and not math.isfinite(beat):
            return None
        return cls(server_id, seq, sampled_at, ready, EngineHealth(beat, *numbers))


def _numbers(server_id: str, text: str, known: KnownNumbers | None) -> tuple[int, ...]:
    """capacity, free, active, waiting, bulk, interactive; ValueError for anything else."""
    seen = known.get(server_id) if known is not None else None
    if seen is not None and seen[0] == text:
        return seen[1]
    numbers = tuple(int(field) for field in text.split(","))
    if len(numbers) != 6:
        raise ValueError(f"expected 6 numbers, got {text!r}")
    if known is not None:
        known[server_id] = (text, numbers)
    return numbers


class LoadBoard:
    """Publish one server's reports; read whole pools'."""

    def __init__(self, client: redis.asyncio.Redis, prefix: str = "sy:") -> None:
        self._redis = client
        self._prefix = prefix
        self._known: KnownNumbers = {}  # see LoadReport.decode
        self._publish_fenced = client.register_script(_PUBLISH_FENCED)

    async def publish(self, pool_id: str, report: LoadReport, *, epoch: int | None = None) -> None:
        """Write the server's report; with `epoch`, only while no newer registration holds its
        id (Fenced otherwise, and nothing written)."""
        key = board_key(pool_id, self._prefix)
        if epoch is None:
            await self._redis.hset(key, report.server_id, report.encode())
            return
        keys = [key, epoch_key(report.server_id)]
        if int(await self._publish_fenced(keys=keys, args=[report.server_id, report.encode(), str(epoch)])) == -1:
            raise Fenced(report.server_id, epoch)

    async def remove(self, pool_id: str, server_id: str) -> None:
        """The server stopped: readers should not wait out its silence."""
        await self._redis.hdel(board_key(pool_id, self._prefix), server_id)

    async def read(self, pool_ids: Iterable[str]) -> dict[str, dict[str, LoadReport]]:
        """Every pool's reports by server, in one round trip."""
        pools = list(pool_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for pool_id in pools:
                pipe.hgetall(board_key(pool_id, self._prefix))
            raws = await pipe.execute()
        boards: dict[str, dict[str, LoadReport]] = {}
        for pool_id, raw in zip(pools, raws, strict=True):
            reports = (LoadReport.decode(_text(server), _text(line), self._known) for server, line in raw.items())
            boards[pool_id] = {report.server_id: report for report in reports if report is not None}
        return boards


class Freshness:
    """Which servers' publishers still publish, on the reader's own clock: a report whose `seq`
    has not advanced for `dead_after_s` is stale (its server or its publisher is gone)."""

    def __init__(self, dead_after_s: float) -> None:
        self._dead_after_s = dead_after_s
        self._seen: dict[str, tuple[int, float]] = {}  # server -> (seq, when it was first seen)

    def fresh(self, report: LoadReport, now: float) -> bool:
        seen = self._seen.get(report.server_id)
        if seen is None or seen[0] != report.seq:
            self._seen[report.server_id] = (report.seq, now)
            return True
        return now - seen[1] < self._dead_after_s

    def forget_all_but(self, server_ids: Iterable[str]) -> None:
        keep = set(server_ids)
        self._seen = {server: seen for server, seen in self._seen.items() if server in keep}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
