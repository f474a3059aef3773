"""Chaos under load (`python -m bench chaos`, `make chaos`): kill anything at any time, then
check from the recorded history that nothing was lost, nothing ran twice and usage is exact.

    stack   two gateway workers, two pools of two servers (both the small model unless
            --large: the large one is too slow for this on two CPU cores), the dispatcher,
            the supervisor in a process of its own, Redis with its append-only file: a
            primary, a replica and three sentinels (--single-redis: one redis-server)
    load    three teams, one closed-loop client each (faults.chaos_load: streamed, whole,
            request_ids with repeats, cancels, hang-ups, OpenAI SDK calls), and one batch
            per team (--batch-entries lines each, 21,000 in all by default, greedy,
            --batch-max-tokens, a deadline of the run's length + BATCH_GRACE_MIN: what has not
            run by then expires)
    faults  seeded (--seed): every kind of faults.chaos_faults in rounds, one every
            60 / --faults-per-minute seconds (--faults: only the kinds named)
    then    batches to a final status, the invariants (faults.chaos_invariants) one by one,
            the stack stopped and checked for leftovers; history in var/chaos/history.jsonl,
            results in bench/results/chaos.json

Targets: 0 violations of every invariant; recovery per fault kind (the first call started
after the fault that completes, as the client saw it) reported as p50 and max.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from config.settings import SwitchyardConfig, load_config
from faults import after_load, chaos_aftermath, chaos_batches, chaos_invariants
from faults.chaos_batches import ChaosBatch
from faults.chaos_faults import FaultInjector
from faults.chaos_history import History, Outcome
from faults.chaos_invariants import Check
from faults.chaos_load import InteractiveLoad, LoadShape, TeamClient
from faults.chaos_stack import ChaosStack, with_replica_set
from quota.keys import SyncKeyStore
from report.result_files import write_result
from stack.measured_stack import measured_config, with_copies

NAME = "chaos"
TEAMS = ("alpha", "beta", "gamma")
POOLS = ("chaos-small", "chaos-large")
STORAGE_BYTES = 16 << 20  # each team's blob budget: small, so fill-disk fills it in seconds
BATCH_GRACE_MIN = 2
SETTLE_TIMEOUT_S = 120.0
ERROR_WINDOW_S = 10.0  # client errors this soon after a fault are counted against it


def chaos_config(base: SwitchyardConfig, large: bool) -> SwitchyardConfig:
    engine = base.pools["small"].engine
    large_engine = base.pools["large"].engine if large and "large" in base.pools else engine
    pools = {POOLS[0]: ("small", engine), POOLS[1]: ("large" if large else "small", large_engine)}
    config = measured_config(base, pools, dict.fromkeys(TEAMS, 1.0))
    for pool_id in POOLS:
        config = with_copies(config, pool_id, 2)
    bulk = config.bulk.model_copy(update={"team_storage_bytes": STORAGE_BYTES})
    return config.model_copy(update={"bulk": bulk, "var_dir": str(base.var_path / "chaos")})


def start(config: SwitchyardConfig, sentinel: bool) -> tuple[ChaosStack, dict[str, dict[str, str]]]:
    replicas = None
    if sentinel:
        config, replicas = with_replica_set(config)
    stack = ChaosStack(config, replicas)
    stack.start()
    try:
        client = stack.redis_admin()
        client.flushall()  # an earlier run's records (its append-only file) would skew this one
        store = SyncKeyStore(client, config.teams)
        headers = {team: {"Authorization": f"Bearer {store.create(team)}"} for team in config.teams}
        client.close()
        stack.ensure_keys()  # the admin key's hash went with the flush
        _wait(stack.all_ready, SETTLE_TIMEOUT_S, "servers re-registered after the flush")
    except BaseException:
        stack.stop()
        raise
    return stack, headers


def _wait(condition: object, timeout_s: float, what: str) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(1.0)
    print(f"chaos: gave up waiting for {what} after {timeout_s:.0f} s")
    return False


async def _load_phase(
    stack: ChaosStack, teams: dict[str, dict[str, str]], args: argparse.Namespace, history: History
) -> tuple[list[ChaosBatch], FaultInjector]:
    url = stack.gateway_url
    clients = [TeamClient(team, teams[team], POOLS) for team in TEAMS]
    batches = [
        ChaosBatch(team, teams[team], POOLS[i % 2], chaos_batches.batch_lines(team, args.batch_entries,
                   args.batch_max_tokens, args.seed + i))
        for i, team in enumerate(TEAMS)
    ]  # fmt: skip
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for batch in batches:
            await chaos_batches.submit(client, batch, f"{int(args.minutes) + BATCH_GRACE_MIN}m")
    run_s = args.minutes * 60
    injector = FaultInjector(stack, history, args.seed, ("gamma", teams["gamma"]))
    if args.faults:
        unknown = set(args.faults) - set(injector.kinds)
        if unknown:
            known = ", ".join(injector.kinds)
            raise SystemExit(f"chaos: no such fault here: {', '.join(sorted(unknown))} (of {known})")
        injector.kinds = tuple(args.faults)
    count = max(1, int(args.minutes * args.faults_per_minute))
    stop = asyncio.Event()
    load = InteractiveLoad(url, history, args.seed, LoadShape(think_s=args.think_s))
    tasks = [
        asyncio.create_task(load.run(clients, stop)),
        asyncio.create_task(injector.run(injector.schedule(count), run_s / (count + 1), stop)),
    ]
    await asyncio.sleep(run_s)
    stop.set()
    await asyncio.gather(*tasks)
    history.marks["load_stopped_s"] = round(history.now(), 1)
    return batches, injector


async def _checks(
    stack: ChaosStack, teams: dict[str, dict[str, str]], args: argparse.Namespace, history: History,
    batches: list[ChaosBatch],
) -> list[Check]:  # fmt: skip
    config = stack.config
    checks = [chaos_invariants.interactive_calls_end(history.calls)]
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=120) as client:
        await chaos_batches.wait(client, batches, (args.minutes + BATCH_GRACE_MIN) * 60 + 90)
        history.marks["batches_final_s"] = round(history.now(), 1)
        checks += await after_load.batch_checks(client, batches)
        await asyncio.to_thread(_wait, stack.all_ready, SETTLE_TIMEOUT_S, "every server ready")
        async with stack.admin_client() as admin_api:
            metered = await after_load.metered_usage(admin_api)
        assert stack.gateway is not None
        log_lines = stack.gateway.log_text().splitlines()  # this run's lines of both workers
        checks += after_load.generation_checks(log_lines, history.calls, metered)
        checks.append(await after_load.retry_check(client, teams, history.calls))
        checks.append(await after_load.rerun_check(client, batches, args.rerun_sample, args.seed))
        history.marks["reruns_done_s"] = round(history.now(), 1)
    admin = stack.redis_admin(socket_timeout=5.0)
    _wait(lambda: not chaos_aftermath.leases_left(admin), config.quota.lease_ttl_s + 30, "leases to go")
    checks.append(chaos_invariants.nothing_left("no lease left", 1, chaos_aftermath.leases_left(admin)))
    admin.close()
    urls = {f"{pool}-{k}": stack.metrics_url(pool, k) for pool in POOLS for k in range(2)}
    _wait(lambda: not chaos_aftermath.kv_held(urls), 60, "KV back to 0")
    held = chaos_aftermath.kv_held(urls)
    checks.append(chaos_invariants.nothing_left("KV back to 0 on every server", len(urls), held))
    return checks


def _fault_rows(history: History) -> list[dict[str, object]]:
    """Per fault kind: how many, the client errors that ended within ERROR_WINDOW_S after one,
    and recovery as clients saw it (from the fault to the end of the first call started after
    it that completed)."""
    rows = []
    completed = sorted((c.started, c.ended) for c in history.calls if c.outcome is Outcome.OK and c.ended is not None)
    by_kind: dict[str, list[float]] = {}
    for fault in history.faults:
        ends = [end for started, end in completed if started >= fault.at]
        if ends:
            by_kind.setdefault(fault.kind, []).append(min(ends) - fault.at)
    errors = [c.ended for c in history.calls if c.outcome is Outcome.ERROR and c.ended is not None]
    for kind in sorted({f.kind for f in history.faults}):
        recoveries = by_kind.get(kind, [])
        near = sum(f.at <= end < f.at + ERROR_WINDOW_S for f in history.faults if f.kind == kind for end in errors)
        rows.append({
            "fault": kind, "injected": sum(f.kind == kind for f in history.faults), "client_errors_10s": near,
            "recovery_p50_s": round(statistics.median(recoveries), 2) if recoveries else None,
            "recovery_max_s": round(max(recoveries), 2) if recoveries else None,
        })  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> dict[str, object]:
    stack, teams = start(chaos_config(load_config(), args.large), sentinel=not args.single_redis)
    config = stack.config
    history = History()
    try:
        batches, injector = asyncio.run(_load_phase(stack, teams, args, history))
        checks = asyncio.run(_checks(stack, teams, args, history, batches))
    finally:
        stack.stop()
    var = config.var_path
    _wait(lambda: not chaos_aftermath.orphans(var), 30, "orphans to go")
    checks.append(chaos_invariants.nothing_left("no orphan process", 1, chaos_aftermath.orphans(var)))
    shm = chaos_aftermath.shm_left(stack.server_ids())
    checks.append(chaos_invariants.nothing_left("no leftover shared memory", len(stack.server_ids()), shm))
    history.write(var / "history.jsonl")
    calls = history.calls
    rows = [check.row() for check in checks] + _fault_rows(history)
    meta = {
        "minutes": args.minutes, "seed": args.seed, "large_pool_model": "large" if args.large else "small",
        "violations": sum(len(c.violations) for c in checks),
        "faults_injected": len(history.faults), "fault_errors": injector.errors,
        "calls": len(calls), "calls_by_outcome": {o.value: sum(c.outcome is o for c in calls) for o in Outcome},
        "calls_per_s": round(len(calls) / (args.minutes * 60), 2),
        "batch_entries": 3 * args.batch_entries, "batch_max_tokens": args.batch_max_tokens,
        "batch_status": {b.batch_id: b.status for b in batches},
        "run_marks_s": history.marks,
        "batch_ends": {kind: sum(e[0][0] == kind for b in batches for e in b.outcomes.values() if e)
                       for kind in ("done", "failed")},
        "violation_details": {c.name: list(c.violations[:20]) for c in checks if c.violations},
        "history": str(var / "history.jsonl"),
    }  # fmt: skip
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's and the load's seed")
    parser.add_argument("--batch-entries", type=int, default=7000, help="lines per batch (three batches)")
    parser.add_argument("--batch-max-tokens", type=int, default=2)
    parser.add_argument("--faults-per-minute", type=float, default=3.0)
    parser.add_argument("--think-s", type=float, default=0.5, help="each team client's pause between calls")
    parser.add_argument(
        "--rerun-sample", type=int, default=None, help="done entries rerun per batch (default: every one)"
    )
    parser.add_argument(
        "--faults", type=lambda text: [k for k in text.split(",") if k], default=None,
        help="only these fault kinds, comma-separated (default: every kind)",
    )  # fmt: skip
    parser.add_argument("--large", action="store_true", help="the second pool runs the large model")
    parser.add_argument("--single-redis", action="store_true", help="one redis-server, no replica or sentinels")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    result = run(parse_args(argv))
    meta = result["meta"]
    assert isinstance(meta, dict)
    return 0 if meta["violations"] == 0 else 1
