"""Usage metering: what each team used, per model, class and hour, kept in Redis.

One finished (or cancelled) request is one `UsageRecord`; `UsageMeter.record` adds it to its
team's hour bucket in one MULTI, so every gateway process adds to the same figures and a
reader never sees half a request:

    sy:usage:bucket:{team}:{yyyymmddhh}   hash  "{model}|{class}|{metric}" -> count
    sy:usage:index:{team}                 zset  yyyymmddhh, scored by the hour's epoch second
    sy:usage:teams                        set   every team that has used anything
    sy:usage:day:{team}:{yyyymmdd}        int   prompt + completion tokens that day (kept 3 days)
    sy:usage:once:{record_id}             str   this record was counted (kept RECORD_ONCE_TTL_S)

Hours and days are UTC. The index lets a query over a year read only the hours that were used;
the day counter makes `tokens_today` (the `tokens_per_day` limit, checked per request) one GET.
Buckets are never expired: they are the bill.

A record with a `record_id` counts once however often it is sent: the gateway sends it again
when a connection broke (a Redis restart or failover), and the connection may have broken
after Redis had run it. The marker outlives every retry (30 s) with room to spare and no
more, so what it costs is a few minutes of ended requests (at 1,350 requests/s about 160,000
keys, ~16 MB). With `ReplicaAcks` the record is held by a replica before `record` returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

import redis.asyncio

from config.replica_acks import ReplicaAcks
from config.script_runner import ScriptRunner

TEAMS_KEY = "sy:usage:teams"
METRICS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "discarded_tokens",
    "cancelled",
    "kv_token_seconds",  # last: the one float
)
_DAY_COUNTER_TTL_S = 3 * 24 * 3600
RECORD_ONCE_TTL_S = 120
_HOUR = timedelta(hours=1)

# KEYS: hour bucket, the team's hour index, the teams set, the team's day counter, and the
# record's once-marker when it has an id. ARGV: team, hour label, hour start (epoch s), day
# tokens, day counter TTL, marker TTL, then (field, i|f, increment) per metric.
_RECORD = """
if KEYS[5] and not redis.call('SET', KEYS[5], '1', 'NX', 'EX', ARGV[6]) then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
if tonumber(ARGV[4]) > 0 then
  redis.call('INCRBY', KEYS[4], ARGV[4])
  redis.call('EXPIRE', KEYS[4], ARGV[5])
end
for i = 7, #ARGV, 3 do
  if ARGV[i + 1] == 'f' then
    redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 2])
  else
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 2])
  end
end
return 1
"""


def bucket_key(team_id: str, hour: datetime) -> str:
    return f"sy:usage:bucket:{team_id}:{hour:%Y%m%d%H}"


def index_key(team_id: str) -> str:
    return f"sy:usage:index:{team_id}"


def day_key(team_id: str, day: datetime) -> str:
    return f"sy:usage:day:{team_id}:{day:%Y%m%d}"


def once_key(record_id: str) -> str:
    return f"sy:usage:once:{record_id}"


# What a datetime can hold, in UTC: a moment with an offset near either end (0001-01-01T00:30+01:00,
# 9999-12-31T23:59-01:00) is a moment before or after it, and no datetime once in UTC.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is taken to be UTC already.

    Raises ValueError (saying which range is accepted) for a moment outside EARLIEST..LATEST
    once in UTC, which Python's datetime cannot hold (an OverflowError otherwise)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{moment.isoformat()} is not within {UTC_RANGE_TEXT} once in UTC") from None


def _utc_text(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


UTC_RANGE_TEXT = f"{_utc_text(EARLIEST)} to {_utc_text(LATEST)}"


def hour_start(moment: datetime) -> datetime:
    return as_utc(moment).replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    """What one request used. `cached_tokens` is the part of `prompt_tokens` served from the
    prefix cache; `cancelled` says the client cancelled it (its tokens so far still count).
    `completion_tokens` are the reply's tokens the client got (billed); `discarded_tokens` the
    engine's work past the reply's end (a stop string), metered apart and never billed.

    `kv_token_seconds` is the KV memory the request held, integrated over time: the caller
    sums tokens held × seconds held over the request's life (for a request that holds its
    prompt from admission and grows one token per step, roughly (prompt + completion / 2) ×
    its duration). It is the real cost of a request: a 30,000-token document held for a
    minute costs far more than its token counts say.

    `record_id`, when set, names the request's one generation: the record counts once,
    however often it is sent.
    """

    team_id: str
    model_id: str
    request_class: str
    requests: int = 1
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    discarded_tokens: int = 0
    cancelled: bool = False
    kv_token_seconds: float = 0.0
    record_id: str | None = None

    def __post_init__(self) -> None:
        counts = (self.requests, self.prompt_tokens, self.cached_tokens, self.completion_tokens, self.discarded_tokens)
        if min(counts) < 0 or self.kv_token_seconds < 0:
            raise ValueError(f"usage cannot be negative: {self}")
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError(f"cached_tokens ({self.cached_tokens}) exceed prompt_tokens ({self.prompt_tokens})")

    def increments(self) -> dict[str, int | float]:
        """The non-zero metrics this record adds, by metric name."""
        values: dict[str, int | float] = {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "discarded_tokens": self.discarded_tokens,
            "cancelled": int(self.cancelled) * self.requests,
            "kv_token_seconds": self.kv_token_seconds,
        }
        return {name: value for name, value in values.items() if value}


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage of one team, model and class over a query's range (or one hour of it)."""

    team_id: str
    model_id: str
    request_class: str
    hour: datetime | None = None  # the hour's start (UTC) when rows are per hour
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cancelled: int = 0
    kv_token_seconds: float = 0.0
    discarded_tokens: int = 0  # last, so rows built by position keep their meaning

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(slots=True)
class _Totals:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRICS[:-1], 0))
    kv_token_seconds: float = 0.0

    def add(self, metric: str, raw: bytes | str) -> None:
        if metric == "kv_token_seconds":
            self.kv_token_seconds += float(raw)
        elif metric in self.counts:
            self.counts[metric] += int(raw)


_RowKey = tuple[str, datetime | None, str, str]  # team, hour, model, class


class UsageMeter:
    """Adds usage records to Redis and reads them back, for every gateway process alike."""

    def __init__(self, client: redis.asyncio.Redis, acks: ScriptRunner | None = None) -> None:
        self._redis = client
        self._record = client.register_script(_RECORD)
        self._acks: ScriptRunner = acks if acks is not None else ReplicaAcks(0, 1)

    async def record(self, rec: UsageRecord, at: datetime) -> bool:
        """Add `rec` to the hour bucket of `at` (when the request ended), atomically, in one
        command (a script: what one request costs Redis stays a handful of commands). False:
        a record of that `record_id` was counted already."""
        hour = hour_start(at)
        prefix = f"{rec.model_id}|{rec.request_class}|"
        day_tokens = rec.prompt_tokens + rec.completion_tokens
        args: list[str | int] = [
            rec.team_id, f"{hour:%Y%m%d%H}", int(hour.timestamp()), day_tokens, _DAY_COUNTER_TTL_S, RECORD_ONCE_TTL_S,
        ]  # fmt: skip
        for metric, value in rec.increments().items():
            args += [prefix + metric, "f" if isinstance(value, float) else "i", repr(value)]
        keys = [bucket_key(rec.team_id, hour), index_key(rec.team_id), TEAMS_KEY, day_key(rec.team_id, hour)]
        if rec.record_id is not None:
            keys.append(once_key(rec.record_id))
        return bool(await self._acks.run(self._redis, self._record, keys, args))

    async def tokens_today(self, team_id: str, now: datetime | None = None) -> int:
        """Prompt + completion tokens `team_id` used since 00:00 UTC (the `tokens_per_day` limit)."""
        value = await self._redis.get(day_key(team_id, as_utc(now or datetime.now(UTC))))
        return int(value) if value is not None else 0

    async def teams(self) -> list[str]:
        """Every team with recorded usage, sorted."""
        members = await self._redis.smembers(TEAMS_KEY)
        return sorted(m.decode() if isinstance(m, bytes) else m for m in members)

    async def query(
        self, team_id: str | None, start: datetime, end: datetime, *, by_hour: bool = False
    ) -> list[UsageRow]:
        """Usage in the hours that overlap [start, end), per team, model and class (and per
        hour with `by_hour`); every team when `team_id` is None. Sorted by team, hour, model,
        class. Unused combinations have no row."""
        team_ids = [team_id] if team_id is not None else await self.teams()
        first, stop = hour_start(start), as_utc(end)
        if not team_ids or stop <= first:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for team in team_ids:
                pipe.zrangebyscore(index_key(team), int(first.timestamp()), f"({stop.timestamp()}")
            hours_per_team: list[list[bytes | str]] = await pipe.execute()
        buckets = [(team, _parse_hour(h)) for team, hours in zip(team_ids, hours_per_team, strict=True) for h in hours]
        async with self._redis.pipeline(transaction=False) as pipe:
            for team, hour in buckets:
                pipe.hgetall(bucket_key(team, hour))
            contents: list[dict[bytes | str, bytes | str]] = await pipe.execute()
        totals: dict[_RowKey, _Totals] = {}
        for (team, hour), content in zip(buckets, contents, strict=True):
            for raw_field, raw_value in content.items():
                model_id, request_class, metric = _text(raw_field).rsplit("|", 2)
                row_key = (team, hour if by_hour else None, model_id, request_class)
                totals.setdefault(row_key, _Totals()).add(metric, raw_value)
        return [_row(key, totals[key]) for key in sorted(totals, key=_sort_key)]


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


def _parse_hour(raw: bytes | str) -> datetime:
    return datetime.strptime(_text(raw), "%Y%m%d%H").replace(tzinfo=UTC)


def _sort_key(key: _RowKey) -> tuple[str, float, str, str]:
    team, hour, model_id, request_class = key
    return team, hour.timestamp() if hour is not None else 0.0, model_id, request_class


def _row(key: _RowKey, totals: _Totals) -> UsageRow:
    team, hour, model_id, request_class = key
    return UsageRow(team, model_id, request_class, hour, **totals.counts, kv_token_seconds=totals.kv_token_seconds)


def sum_rows(rows: Iterable[UsageRow]) -> dict[str, int | float]:
    """Totals of `rows`, metric by metric (for a table's last line)."""
    sums: dict[str, int | float] = dict.fromkeys(METRICS, 0)
    for row in rows:
        for metric in METRICS:
            sums[metric] += getattr(row, metric)
    return sums
