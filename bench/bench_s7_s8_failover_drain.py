"""S7 — a server dies mid-reply; S8 — a server is taken out of service. One pool of two.

    reference  16 streamed greedy replies (temperature 0, ignore_eos), nothing interrupted
    S7         the same 16 again; once every one is streaming, SIGKILL the tritonserver of the
               server holding more of them (the child of its `switchyard triton` wrapper, not
               the wrapper: the process that serves dies; the supervisor then relaunches it)
    S8         (both servers ready again) the same 16 again; once streaming, drain the server
               holding fewer of them (`ServerRegistry.request_drain`, what `switchyard drain`
               does) and send new short requests from that moment for NEW_WORK_S: the server
               the router would pick for new work, so any window in which a drain is not yet
               seen shows up as new work there

A reply is completed when it ends with stop reason `length` and all MAX_TOKENS tokens, cut
otherwise (an error event, a broken connection, or fewer tokens); mismatched when completed
but its text differs from the reference's. A pause is the longest gap between two deltas of
one reply from the kill (the drain; for the reference, from when all 16 were streaming).

Which server holds a reply: Triton counts a decoupled request in `nv_inference_count` of
`llm` when it is received (its `execute` returns at once), not when its last response goes,
so the counts' rise while the 16 start says how many went where, and a draining server's
rise from the drain until it stopped is exactly the new work it took (sampled until its
metrics go).

Targets: S7 every reply completes, none cut, none mismatched; S8 none cut, no new work taken.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.live import StreamTrace, load_tokenizer, prompt_of, read_inference_count, start_streams, stream_generate
from config.redis_client import redis_client as admin_redis_client
from fleet_state.registry import ServerRegistry
from fleet_state.server_state import ServerState
from report.result_files import write_result
from stack.local_stack import Stack

NAME = "s7_s8_failover_drain"
STREAMS = 16
PROMPT_TOKENS = 64
MAX_TOKENS = 1000  # about 5 s a reply with 8 on each server of the CPU engine
STARTED_DELTAS = 2  # a reply counts as streaming once it has this many deltas
NEW_WORK_S = 4.0
NEW_WORK_CLIENTS = 2
NEW_MAX_TOKENS = 8
RELAUNCH_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Pool:
    """The bench pool's servers, how to reach their metrics, and the registry."""

    server_ids: list[str]
    metrics: dict[str, str]  # server id -> metrics URL
    registry: ServerRegistry

    def counts(self) -> dict[str, int]:
        return {sid: read_inference_count(url) for sid, url in self.metrics.items()}


@dataclass(frozen=True, slots=True)
class Kill:
    """What S7 saw besides the replies."""

    victim: str
    streams: dict[str, int]  # replies per server when the kill came
    tokens_at_kill: list[int]  # per reply, what the client had then
    failovers_logged: int  # the gateway's "trying another" lines during S7
    relaunch_ready_s: float


@dataclass(frozen=True, slots=True)
class Drain:
    """What S8 saw besides the replies."""

    server_id: str
    streams: dict[str, int]  # replies per server when the drain began
    count_at_drain: int
    count_final: int  # its last sample before it stopped
    increments: list[tuple[float, int]]  # (s after the drain, count) at each rise
    gone_after_s: float | None
    new: list[StreamTrace]

    @property
    def new_work(self) -> int:
        return self.count_final - self.count_at_drain


def _tritonserver_pid(wrapper_pid: int) -> int:
    """The `tritonserver` child of a `switchyard triton` wrapper, from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if int(rest[1]) == wrapper_pid and comm.startswith("tritonserver"):
            return int(stat.parent.name)
    raise RuntimeError(f"process {wrapper_pid} has no tritonserver child")


async def _start(
    client: httpx.AsyncClient, url: str, bodies: list[dict[str, object]], pool: Pool
) -> tuple[list[StreamTrace], list[asyncio.Task[StreamTrace]], dict[str, int]]:
    """The replies streaming, and how many went to each server."""
    before = await asyncio.to_thread(pool.counts)
    traces, tasks = start_streams(client, url, bodies)
    deadline = time.monotonic() + 60.0
    while any(len(t.event_times) < STARTED_DELTAS for t in traces):
        if any(t.error is not None or t.finished is not None for t in traces) or time.monotonic() > deadline:
            raise RuntimeError(f"replies never all got going: {[t.error for t in traces if t.error]}")
        await asyncio.sleep(0.02)
    after = await asyncio.to_thread(pool.counts)
    return traces, tasks, {sid: after[sid] - before[sid] for sid in pool.server_ids}


async def _finish(traces: list[StreamTrace], tasks: list[asyncio.Task[StreamTrace]]) -> None:
    """Wait for every reply; one whose connection broke counts as cut, with the error."""
    for trace, outcome in zip(traces, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
        if isinstance(outcome, BaseException):
            trace.error = f"client: {outcome!r}"


async def _s7(
    client: httpx.AsyncClient, url: str, bodies: list[dict[str, object]], pool: Pool, gateway_log: Path
) -> tuple[list[StreamTrace], float, Kill]:
    # Everything the kill needs is read before the replies start: it must land mid-reply.
    pids = {}
    for server_id in pool.server_ids:
        info = await pool.registry.get(server_id)
        if info is None or info.pid is None:
            raise RuntimeError(f"{server_id} is not registered with a pid")
        pids[server_id] = _tritonserver_pid(info.pid)
    log_offset = gateway_log.stat().st_size
    traces, tasks, streams = await _start(client, url, bodies, pool)
    victim = max(pool.server_ids, key=lambda sid: streams[sid])
    killed_at, killed_unix = time.perf_counter(), time.time()
    os.kill(pids[victim], signal.SIGKILL)
    tokens_at_kill = [t.completion_tokens for t in traces]
    await _finish(traces, tasks)
    with gateway_log.open("rb") as log:
        log.seek(log_offset)
        failovers = log.read().count(b"trying another")
    relaunch_s = await _wait_relaunched(pool.registry, victim, killed_unix)
    return traces, killed_at, Kill(victim, streams, tokens_at_kill, failovers, relaunch_s)


async def _wait_relaunched(registry: ServerRegistry, server_id: str, killed_at: float) -> float:
    """Seconds from `killed_at` (Unix time) until `server_id` is READY in a life begun after it."""
    while True:
        info = await registry.get(server_id)
        if info is not None and info.started_at > killed_at and info.state is ServerState.READY:
            return time.time() - killed_at
        if time.time() - killed_at > RELAUNCH_TIMEOUT_S:
            raise RuntimeError(f"{server_id} not relaunched and ready {RELAUNCH_TIMEOUT_S:.0f} s after the kill")
        await asyncio.sleep(0.2)


class _CountSampler:
    """A server's `nv_inference_count` every `interval_s` until its metrics stop answering."""

    def __init__(self, metrics_url: str, interval_s: float = 0.05) -> None:
        self.metrics_url = metrics_url
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []  # (perf_counter, count)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        misses = 0
        while not self._stop.wait(self.interval_s) and misses < 10:
            try:
                self.samples.append((time.perf_counter(), read_inference_count(self.metrics_url)))
                misses = 0
            except (OSError, ValueError):
                misses += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def _new_work(client: httpx.AsyncClient, url: str, body: dict[str, object], until: float) -> list[StreamTrace]:
    """Short requests back to back until `until` (perf_counter)."""
    traces = []
    while time.perf_counter() < until:
        traces.append(await stream_generate(client, url, body))
    return traces


async def _s8(
    client: httpx.AsyncClient, url: str, bodies: list[dict[str, object]], pool: Pool, short: dict[str, object]
) -> tuple[list[StreamTrace], float, Drain]:
    traces, tasks, streams = await _start(client, url, bodies, pool)
    drained = min(pool.server_ids, key=lambda sid: streams[sid])
    sampler = _CountSampler(pool.metrics[drained])
    count_at_drain = await asyncio.to_thread(read_inference_count, pool.metrics[drained])
    drain_at = time.perf_counter()
    if not await pool.registry.request_drain(drained):
        raise RuntimeError(f"{drained} is not registered")
    until = drain_at + NEW_WORK_S
    batches = await asyncio.gather(*(_new_work(client, url, short, until) for _ in range(NEW_WORK_CLIENTS)))
    await _finish(traces, tasks)
    gone_s = await _wait_gone(pool.registry, drained, drain_at)
    sampler.stop()
    increments = [(round(at - drain_at, 2), count) for at, count in _rises(sampler.samples) if at > drain_at]
    final = sampler.samples[-1][1] if sampler.samples else count_at_drain
    new = [t for batch in batches for t in batch]
    return traces, drain_at, Drain(drained, streams, count_at_drain, final, increments, gone_s, new)


def _rises(samples: list[tuple[float, int]]) -> list[tuple[float, int]]:
    return [(at, count) for (_, last), (at, count) in itertools.pairwise(samples) if count != last]


async def _wait_gone(registry: ServerRegistry, server_id: str, since: float) -> float | None:
    """Seconds from `since` until the drained server left the registry; None if it did not in time."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while await registry.get(server_id) is not None:
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(0.2)
    return time.perf_counter() - since


def _cut(trace: StreamTrace) -> str:
    """Why a reply did not complete ('' when it did)."""
    if trace.error is not None:
        return f"error after {trace.completion_tokens} tokens: {trace.error[:200]}"
    if trace.stop_reason != "length" or trace.completion_tokens != MAX_TOKENS:
        return f"ended {trace.stop_reason!r} after {trace.completion_tokens} tokens"
    return ""


def _outcome(case: str, traces: list[StreamTrace], reference: list[StreamTrace], since: float) -> dict[str, object]:
    completed = [not _cut(t) for t in traces]
    mismatched = sum(ok and t.text != ref.text for ok, t, ref in zip(completed, traces, reference, strict=True))
    pauses = [max(t.gaps(since=since), default=0.0) for t in traces]
    return {
        "case": case,
        "replies": len(traces),
        "completed": sum(completed),
        "cut": len(traces) - sum(completed),
        "mismatched": mismatched,
        "max_pause_ms": round(max(pauses) * 1000, 1),
        "paused_over_250ms": sum(p > 0.25 for p in pauses),
        "e2e_max_s": max(t.e2e or 0.0 for t in traces),
    }


async def _scenario(stack: Stack, model: str, headers: dict[str, str]) -> dict[str, object]:
    config, url = stack.config, stack.gateway_url
    tokenizer = load_tokenizer(config, model)
    bodies: list[dict[str, object]] = [
        {"model": model, "prompt": prompt_of(tokenizer, PROMPT_TOKENS, seed=700 + i), "max_tokens": MAX_TOKENS,
         "temperature": 0.0, "ignore_eos": True}
        for i in range(STREAMS)
    ]  # fmt: skip
    short = {"model": model, "prompt": prompt_of(tokenizer, 32, seed=9), "max_tokens": NEW_MAX_TOKENS}
    server_ids = [f"{model}-{k}" for k in range(config.pools[model].target_copies)]
    redis_client = admin_redis_client(config, "admin")
    pool = Pool(
        server_ids,
        {sid: stack.metrics_url(model, k) for k, sid in enumerate(server_ids)},
        ServerRegistry(redis_client, config.fleet.dead_after_s),
    )
    try:
        async with httpx.AsyncClient(timeout=None, headers=headers) as client:
            reference = list(await asyncio.gather(*(stream_generate(client, url, b) for b in bodies)))
            if any(_cut(t) for t in reference):
                raise RuntimeError(f"reference run failed: {[_cut(t) for t in reference if _cut(t)]}")
            killed, killed_at, kill = await _s7(client, url, bodies, pool, config.var_path / "logs" / "gateway.log")
            await asyncio.sleep(2 * config.fleet.heartbeat_s)  # the gateways' directories see it again
            drained, drain_at, drain = await _s8(client, url, bodies, pool, short)
    finally:
        await redis_client.aclose()

    # The reference's pauses: from when every reply was streaming, as for S7 and S8.
    steady = max(t.event_times[min(STARTED_DELTAS, len(t.event_times)) - 1] for t in reference)
    s8 = _outcome(f"S8: {drain.server_id} drained", drained, reference, drain_at)
    s8 |= {"new_requests": len(drain.new), "new_failed": sum(t.error is not None for t in drain.new),
           "new_on_drained": drain.new_work}  # fmt: skip
    rows = [
        _outcome("reference (uninterrupted)", reference, reference, steady),
        _outcome(f"S7: {kill.victim} tritonserver SIGKILLed", killed, reference, killed_at),
        s8,
    ]
    meta = {
        "streams": STREAMS,
        "max_tokens": MAX_TOKENS,
        "s7_victim": kill.victim,
        "s7_replies_per_server": kill.streams,
        "s7_tokens_at_kill": kill.tokens_at_kill,
        "s7_gateway_failovers_logged": kill.failovers_logged,
        "s7_relaunch_ready_s": round(kill.relaunch_ready_s, 1),
        "s7_cut": [_cut(t) for t in killed if _cut(t)],
        "s8_drained": drain.server_id,
        "s8_replies_per_server": drain.streams,
        "s8_new_work_on_drained": drain.new_work,
        "s8_count_at_drain": drain.count_at_drain,
        "s8_count_final": drain.count_final,
        "s8_count_rises_after_drain_s": drain.increments,
        "s8_server_gone_after_s": None if drain.gone_after_s is None else round(drain.gone_after_s, 1),
        "s8_cut": [_cut(t) for t in drained if _cut(t)],
        "s8_new_request_errors": sorted({t.error[:200] for t in drain.new if t.error is not None}),
        "targets": {"s7": "all completed, 0 cut, 0 mismatched", "s8": "0 cut, 0 new work on the drained server"},
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def run(stack: Stack, model: str, headers: dict[str, str]) -> dict[str, object]:
    """`stack`: running `model`'s pool with two copies (`stack.measured_stack.with_copies`)."""
    return asyncio.run(_scenario(stack, model, headers))
