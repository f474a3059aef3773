"""`switchyard load`: a scripted ramp of streamed requests against the gateway, reported as it
runs (docs/autoscaler.md has the demonstration it drives).

    switchyard load --ramp "0:1,60:6,180:6,240:1" [--model M] [--max-tokens 32] [--every 10]
                    [--rehearse]

Every `--every` seconds a line: requests sent and their rate, time to first token p50 / p99,
replies finished, errors (refused before a token) and cut replies (a stream that ended without
its final event), then the totals. Exit code 1 when any reply was cut.

`--rehearse` first teaches the autoscaler the ramp as if it had run yesterday at this time
(`autoscaler/rate_history.py`), so its load profile expects it and servers start ahead of it, as
they would on a fleet that has seen a thousand mornings. The ramp then starts two autoscaler
intervals later, once the autoscaler has taken the lesson.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from config.environment import SwitchyardEnvironment
from config.redis_client import redis_client
from config.settings import SwitchyardConfig
from switchyard.load_generator import IntervalReport, LoadGenerator
from switchyard.load_ramp import Ramp

_HEAD = (
    f"{'time':>11}  {'sent':>5}  {'req/s':>6}  {'ttft p50':>8}  {'ttft p99':>8}  {'done':>5}  {'errors':>6}  "
    f"{'cut':>4}  {'running':>7}"
)


def add_load_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`load` and its options, run by `load`."""
    parser = sub.add_parser("load", help="send a scripted ramp of streamed requests and report TTFT, errors, cuts")
    parser.add_argument(
        "--ramp", required=True, help='"t:req/s,..." linear between points, e.g. "0:1,60:6,180:6,240:1"'
    )
    parser.add_argument("--model", default=None, help="model to call (default: the first pool's)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt", default="Tell me a story about a river")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between report lines")
    parser.add_argument("--url", default=None, help="gateway URL (default: the configured gateway)")
    parser.add_argument(
        "--api-key", default=None, help="default: $SWITCHYARD_API_KEY, else the first team's var/keys/<team>-api-key"
    )
    parser.add_argument("--rehearse", action="store_true", help="teach the autoscaler the ramp first (as yesterday's)")
    parser.set_defaults(func=load)
    return parser


def load(config: SwitchyardConfig, args: argparse.Namespace) -> int:
    try:
        ramp = Ramp.parse(args.ramp)
    except ValueError as exc:
        print(f"switchyard load: {exc}", file=sys.stderr)
        return 2
    model = args.model or next(iter(config.pools.values())).model_id
    key = args.api_key or SwitchyardEnvironment().api_key or _default_key(config)
    if key is None:
        print("switchyard load: no API key: --api-key, $SWITCHYARD_API_KEY or var/keys/<team>-api-key", file=sys.stderr)
        return 2
    host = "127.0.0.1" if config.gateway.host in ("0.0.0.0", "::") else config.gateway.host
    url = args.url or f"http://{host}:{config.gateway.port}"
    start_at = None
    if args.rehearse:
        start_at = time.time() + 2 * config.autoscaler.interval_s
        taught = asyncio.run(rehearse(config, config.pools_for_model(model), ramp, start_at))
        print(f"taught the autoscaler {taught} rates of this ramp as yesterday's; starting in "
              f"{start_at - time.time():.0f} s")  # fmt: skip
    generator = LoadGenerator(url, key, model, prompt=args.prompt, max_tokens=args.max_tokens)
    print(_HEAD, flush=True)
    run = asyncio.run(generator.run(ramp, report_every_s=args.every, on_report=_print, start_at=start_at))
    total = run.report(0.0, float("inf"))
    print(f"total: {total.sent} sent, {total.finished} finished, {total.errors} errors, {total.cut} cut; "
          f"TTFT p50 {_s(total.ttft_p50_s)}, p99 {_s(total.ttft_p99_s)}")  # fmt: skip
    return 1 if total.cut else 0


async def rehearse(config: SwitchyardConfig, pool_ids: list[str], ramp: Ramp, start_at: float) -> int:
    """Queue the ramp, shifted one day back from `start_at`, for the autoscaler of each pool:
    one rate per autoscaler interval (what it would have recorded). Returns the points taught."""

    from autoscaler.load_profile import DAY_S
    from autoscaler.rate_history import RateHistory

    step = config.autoscaler.interval_s
    points = [(start_at - DAY_S + i * step, ramp.rate_at(i * step)) for i in range(int(ramp.duration_s / step) + 1)]
    client = redis_client(config, "admin")
    try:
        history = RateHistory(client)
        return sum([await history.teach(pool_id, points) for pool_id in pool_ids])
    finally:
        await client.aclose()


def _print(report: IntervalReport) -> None:
    span = f"{report.start_s:.0f}-{report.end_s:.0f}s"
    print(
        f"{span:>11}  {report.sent:>5}  {report.rate:>6.2f}  {_s(report.ttft_p50_s):>8}  {_s(report.ttft_p99_s):>8}  "
        f"{report.finished:>5}  {report.errors:>6}  {report.cut:>4}  {report.in_flight:>7}",
        flush=True,
    )


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def _default_key(config: SwitchyardConfig) -> str | None:
    from quota.key_files import default_key_path, read_key_file

    path = default_key_path(config.var_path, config.teams)
    return None if path is None else read_key_file(path)
