"""`switchyard keys ...` and `switchyard usage`: keys and usage in the Redis of switchyard.yaml.

switchyard keys create TEAM        a new key, printed once (stdout: the key alone)
switchyard keys list               team, hash prefix and source of every key
switchyard keys revoke PREFIX      forget the key whose hash starts with PREFIX
switchyard usage [--team T] [--since 24h] [--hourly]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import redis
import redis.asyncio

from config.redis_client import redis_client, sync_redis_client
from config.settings import SwitchyardConfig
from contracts.service_tier import tier_of
from quota.keys import SyncKeyStore, UnknownTeam
from quota.usage import UsageMeter, UsageRow, as_utc, sum_rows
from report.text_table import text_table

HASH_PREFIX_CHARS = 12
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def add_quota_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`keys create|list|revoke` and `usage`, each run by the function of this module it names."""
    keys = sub.add_parser("keys", help="create, list and revoke API keys (stored hashed in Redis)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="make a key for TEAM and print it once")
    create.add_argument("team")
    create.set_defaults(func=keys_create)
    listing = keys_sub.add_parser("list", help="team and hash prefix of every key")
    listing.set_defaults(func=keys_list)
    revoke = keys_sub.add_parser("revoke", help="forget the key whose hash starts with PREFIX")
    revoke.add_argument("prefix")
    revoke.set_defaults(func=keys_revoke)

    parser = sub.add_parser("usage", help="print usage per team, model and class")
    parser.add_argument("--team", default=None, help="one team (default: all)")
    parser.add_argument("--since", default="24h", help="a duration (24h, 7d) or an ISO time (default 24h)")
    parser.add_argument("--hourly", action="store_true", help="one row per hour")
    parser.set_defaults(func=usage)


def _unreachable(config: SwitchyardConfig, exc: Exception) -> int:
    print(f"cannot reach redis at {config.redis.address} ({exc}); is the platform up (`make up`)?", file=sys.stderr)
    return 1


def keys_create(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    store = SyncKeyStore(sync_redis_client(config, "admin"), config.teams)
    try:
        key = store.create(args.team)
    except UnknownTeam as exc:
        print(f"{exc}: add it under `teams:` first", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        return _unreachable(config, exc)
    print(key)
    print(f"key for team {args.team!r}: shown once, only its hash is stored", file=sys.stderr)
    return 0


def keys_list(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    store = SyncKeyStore(sync_redis_client(config, "admin"), config.teams)
    try:
        entries = store.list()
    except redis.RedisError as exc:
        return _unreachable(config, exc)
    rows = [(e.team_id, e.key_hash[:HASH_PREFIX_CHARS], e.source) for e in entries]
    print(text_table(("team", "key hash", "source"), rows))
    return 0


def keys_revoke(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    store = SyncKeyStore(sync_redis_client(config, "admin"), config.teams)
    try:
        matches = [e for e in store.list() if e.source == "redis" and e.key_hash.startswith(args.prefix.lower())]
        if len(matches) != 1:
            found = "no key" if not matches else f"{len(matches)} keys"
            print(f"{found} with a hash starting {args.prefix!r}; see `switchyard keys list`", file=sys.stderr)
            return 2
        store.revoke(matches[0].key_hash)
    except redis.RedisError as exc:
        return _unreachable(config, exc)
    print(f"revoked key {matches[0].key_hash[:HASH_PREFIX_CHARS]} of team {matches[0].team_id!r}")
    return 0


def parse_since(text: str, now: datetime) -> datetime:
    """`24h`, `30m`, `7d`, `2w` before `now`, or an ISO 8601 time (UTC unless it says)."""
    match = _DURATION.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        return as_utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(f"--since {text!r}: use a duration (24h, 30m, 7d) or an ISO time") from None


def usage(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    try:
        start = parse_since(args.since, now)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    try:
        rows = asyncio.run(_query_usage(config, args.team, start, now, args.hourly))
    except redis.RedisError as exc:
        return _unreachable(config, exc)
    print(f"usage from {start:%Y-%m-%d %H:%M} to {now:%Y-%m-%d %H:%M} UTC (whole hours that overlap)")
    print(usage_table(rows, hourly=args.hourly))
    return 0


async def _query_usage(
    config: SwitchyardConfig, team: str | None, start: datetime, end: datetime, hourly: bool
) -> list[UsageRow]:
    client = redis_client(config, "admin")
    try:
        return await UsageMeter(client).query(team, start, end, by_hour=hourly)
    finally:
        await client.aclose()


def usage_table(rows: Sequence[UsageRow], hourly: bool = False) -> str:
    head = ("team", *(("hour",) if hourly else ()), "model", "tier", "requests", "prompt", "cached", "completion")
    head = (*head, "cancelled", "kv token-s")
    lines: list[tuple[str, ...]] = []
    for r in rows:
        hour = (f"{r.hour:%Y-%m-%d %H:00}",) if hourly and r.hour is not None else ()
        counts = (r.requests, r.prompt_tokens, r.cached_tokens, r.completion_tokens, r.cancelled)
        lines.append(
            (r.team_id, *hour, r.model_id, tier_of(r.request_class), *map(str, counts), f"{r.kv_token_seconds:.1f}")
        )
    if rows:
        totals = sum_rows(rows)
        label = ("total", *([""] * (3 if hourly else 2)))
        sums = [str(int(totals[m])) for m in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")]
        lines.append((*label, *sums, str(int(totals["cancelled"])), f"{totals['kv_token_seconds']:.1f}"))
    return text_table(head, lines) + ("" if rows else "\n(no usage)")
