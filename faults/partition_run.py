"""Partitions under load (`python -m bench partitions`, `make chaos`): the chaos run's load and
batches over a stack laid across network namespaces, with links cut instead of processes
killed; then the chaos run's invariants from the recorded histories, plus: no call hung past
its timeout, recovery per fault kind as clients saw it, and no acknowledged write lost.

    hosts   nine namespaces on one bridge (faults.netns_hosts, 10.232.0.0/24): two gateway
            hosts, two server hosts (copy k of both pools on srv k+1, self-registered), a
            control host (the dispatcher), three Redis hosts (a primary and two replicas) and
            a sentinel host (faults.partition_stack); the clients in the root namespace
    load    per gateway, three teams' closed-loop clients (faults.chaos_load) and one long
            reply after another on each pool (every fault finds streams mid-reply); one batch
            per team, submitted through the gateways in turn; a write probe on gw1 counting the
            durable writes it was told were done (faults.partition_probe)
    faults  seeded rounds of every kind of faults.partition_faults, one every
            60 / --faults-per-minute seconds, each held --hold-s
    then    batches to a final status, the checks, the stack stopped, the namespaces removed
            (and checked gone); histories in var/partitions/history-<gateway>.jsonl, results
            in bench/results/partitions.json

Skips with a message (exit 0) where namespaces cannot be made (not root, no `ip netns`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import time
from dataclasses import asdict

import httpx

from config.settings import SwitchyardConfig, load_config
from faults import after_load, chaos_aftermath, chaos_batches, chaos_invariants, partition_recovery
from faults.chaos_batches import ChaosBatch
from faults.chaos_history import CallRecord, History, Outcome
from faults.chaos_invariants import Check
from faults.chaos_load import InteractiveLoad, LoadShape, TeamClient
from faults.chaos_run import BATCH_GRACE_MIN, POOLS, TEAMS, chaos_config
from faults.netns_hosts import PREFIX, NamespacesUnavailable, bridged_hosts
from faults.partition_faults import PartitionFaults
from faults.partition_probe import ACKED_KEY
from faults.partition_stack import GATEWAY_HOSTS, ROLES, PartitionStack
from report.result_files import write_result
from server_host.process import wait_until

NAME = "partitions"
SETTLE_TIMEOUT_S = 120.0
REVIVE_EVERY_S = 2.0


def partitions_config(base: SwitchyardConfig) -> SwitchyardConfig:
    config = chaos_config(base, large=False)
    return config.model_copy(update={"var_dir": str(base.var_path / "partitions")})


async def _revive(stack: PartitionStack, stop: asyncio.Event) -> None:
    """The process manager: a part that exited is started again (a fenced server exits)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), REVIVE_EVERY_S)
        await asyncio.to_thread(stack.revive)


async def _load_phase(
    stack: PartitionStack, args: argparse.Namespace, histories: dict[str, History], faults: PartitionFaults
) -> list[tuple[str, ChaosBatch]]:
    teams = stack.team_headers
    clients = [TeamClient(team, teams[team], POOLS) for team in TEAMS]
    batches = [
        (GATEWAY_HOSTS[i % 2], ChaosBatch(team, teams[team], POOLS[i % 2], chaos_batches.batch_lines(
            team, args.batch_entries, args.batch_max_tokens, args.seed + i)))
        for i, team in enumerate(TEAMS)
    ]  # fmt: skip
    for role, batch in batches:
        async with httpx.AsyncClient(base_url=stack.gateway_url(role), timeout=120) as client:
            await chaos_batches.submit(client, batch, f"{int(args.minutes) + BATCH_GRACE_MIN}m")
    run_s = args.minutes * 60
    count = max(1, round(args.minutes * args.faults_per_minute))
    stop, shape = asyncio.Event(), LoadShape(think_s=args.think_s)
    loads = [
        InteractiveLoad(stack.gateway_url(role), histories[role], args.seed + 1000 * i, shape)
        for i, role in enumerate(GATEWAY_HOSTS)
    ]
    tasks = [asyncio.create_task(load.run(clients, stop)) for load in loads]
    tasks += [asyncio.create_task(load.run_long(clients[0], stop)) for load in loads]
    tasks.append(asyncio.create_task(faults.run(faults.schedule(count), run_s / (count + 1), stop)))
    tasks.append(asyncio.create_task(_revive(stack, stop)))
    await asyncio.sleep(run_s)
    stop.set()
    await asyncio.gather(*tasks)
    return batches


async def _checks(
    stack: PartitionStack, args: argparse.Namespace, calls: list[CallRecord], batches: list[tuple[str, ChaosBatch]]
) -> list[Check]:
    checks = [chaos_invariants.interactive_calls_end(calls)]
    checks.append(partition_recovery.no_call_hangs(calls, LoadShape().call_timeout_s, args.minutes * 60))
    only = [batch for _, batch in batches]
    async with httpx.AsyncClient(base_url=stack.gateway_url(GATEWAY_HOSTS[1]), timeout=120) as client:
        await chaos_batches.wait(client, only, (args.minutes + BATCH_GRACE_MIN) * 60 + 90)
        checks += await after_load.batch_checks(client, only)
        await asyncio.to_thread(wait_until, stack.all_ready, SETTLE_TIMEOUT_S, 1.0)
        async with stack.admin_client(GATEWAY_HOSTS[0]) as admin_api:
            metered = await after_load.metered_usage(admin_api)
        checks += after_load.generation_checks(stack.gateway_logs(), calls, metered)
        checks.append(await after_load.retry_check(client, stack.team_headers, calls))
        checks.append(await after_load.rerun_check(client, only, args.rerun_sample, args.seed))
    admin = stack.redis_admin(socket_timeout=5.0, decode_responses=True)
    try:
        lease_ttl = stack.config.quota.lease_ttl_s + 30
        await asyncio.to_thread(wait_until, lambda: not chaos_aftermath.leases_left(admin), lease_ttl, 1.0)
        checks.append(chaos_invariants.nothing_left("no lease left", 1, chaos_aftermath.leases_left(admin)))
        acked = stack.probe_path().read_text().split() if stack.probe_path().exists() else []
        checks.append(partition_recovery.acked_writes_kept(acked, set(admin.smembers(ACKED_KEY))))  # type: ignore[arg-type]
    finally:
        admin.close()
    urls = stack.metrics_urls()
    await asyncio.to_thread(wait_until, lambda: not chaos_aftermath.kv_held(urls), 60, 1.0)
    checks.append(
        chaos_invariants.nothing_left("KV back to 0 on every server", len(urls), chaos_aftermath.kv_held(urls))
    )
    return checks


def _namespaces_left() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    names = [line.split(" ", 1)[0] for line in listed.splitlines()]
    names += [line.split(": ")[1].split("@", 1)[0] for line in links.splitlines() if ": " in line]
    return [name for name in names if name.startswith(PREFIX)]


def run(args: argparse.Namespace) -> dict[str, object]:
    config = partitions_config(load_config())
    with bridged_hosts(ROLES) as net:
        stack = PartitionStack(config, net, POOLS)
        try:
            stack.start()
            start = time.monotonic()  # every history is timed from the same start
            histories = {role: History(clock=start) for role in GATEWAY_HOSTS}
            faults = PartitionFaults(stack, histories[GATEWAY_HOSTS[0]], args.seed, args.hold_s)
            batches = asyncio.run(_load_phase(stack, args, histories, faults))
            windows, fault_errors, restarts = faults.windows, faults.errors, dict(stack.restarts)
            calls = [c for h in histories.values() for c in h.calls]
            checks = asyncio.run(_checks(stack, args, calls, batches))
        finally:
            stack.stop()
    var = config.var_path
    checks.append(chaos_invariants.nothing_left("no namespace, veth or bridge left", 1, _namespaces_left()))
    wait_until(lambda: not chaos_aftermath.orphans(var), 30)
    checks.append(chaos_invariants.nothing_left("no orphan process", 1, chaos_aftermath.orphans(var)))
    for role, history in histories.items():
        history.write(var / f"history-{role}.jsonl")
    by_gateway = {role: h.calls for role, h in histories.items()}
    rows = [check.row() for check in checks] + partition_recovery.fault_rows(by_gateway, windows)
    meta = {
        "minutes": args.minutes, "seed": args.seed, "hold_s": args.hold_s, "hosts": list(ROLES),
        "violations": sum(len(c.violations) for c in checks),
        "faults": [asdict(w) for w in windows], "fault_errors": fault_errors, "restarts": restarts,
        "calls": len(calls), "calls_by_outcome": {o.value: sum(c.outcome is o for c in calls) for o in Outcome},
        "calls_by_gateway": {role: len(h.calls) for role, h in histories.items()},
        "batch_entries": 3 * args.batch_entries, "batch_status": {b.batch_id: b.status for _, b in batches},
        "violation_details": {c.name: list(c.violations[:20]) for c in checks if c.violations},
        "histories": [str(var / f"history-{role}.jsonl") for role in histories],
    }  # fmt: skip
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench partitions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--quick", action="store_true", help="3 minutes, one fault of each kind, small batches")
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's and the load's seed")
    parser.add_argument("--batch-entries", type=int, default=2000, help="lines per batch (three batches)")
    parser.add_argument("--batch-max-tokens", type=int, default=2)
    parser.add_argument("--faults-per-minute", type=float, default=1.5)
    parser.add_argument("--hold-s", type=float, default=10.0, help="how long a cut lasts (split brain: to promotion)")
    parser.add_argument("--think-s", type=float, default=0.5, help="each team client's pause between calls")
    parser.add_argument("--rerun-sample", type=int, default=300, help="done entries rerun per batch")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.batch_entries, args.faults_per_minute, args.hold_s = 3.0, 200, 5 / 3, 8.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except NamespacesUnavailable as exc:
        print(f"partitions: skipped, no network namespaces here: {exc}")
        return 0
    meta = result["meta"]
    assert isinstance(meta, dict)
    return 0 if meta["violations"] == 0 else 1
