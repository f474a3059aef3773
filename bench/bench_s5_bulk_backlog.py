"""S5 — Monday 9 am: five million background jobs.

Part A (ingestion): N requests (default 5,000,000; `SWITCHYARD_BENCH_S5_REQUESTS` for a quick
run) in native batch files of 50,000 requests with ~1 KB prompts, uploaded through
`POST /v1/batches` by two concurrent clients, each file's bytes generated as they are sent.
The dispatcher is stopped meanwhile, so the backlog waits instead of running. After every
file: the gateway's memory (uvicorn parent and workers, VmRSS and VmHWM from /proc) and Redis
`used_memory`, to show memory stays flat in the number of requests.

Part B (interactive beside the backlog): streamed time to first token of a few closed-loop
interactive clients, first with nothing queued (before Part A), then with the dispatcher
releasing the whole backlog; then, interactive clients stopped, how fast bulk entries end.
Finally every batch is cancelled and, for a bounded time, checked to end with every entry
accounted for (done, failed with a reason, or expired).

Targets: ingestion >= 20,000 requests/s with flat memory; TTFT p99 with the backlog <= 1.2x
without it.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from bench.live import StreamTrace, load_tokenizer, percentile, prompt_of, stream_generate
from config.redis_client import sync_redis_client
from config.settings import SwitchyardConfig
from report.result_files import write_result
from stack.local_stack import Stack

NAME = "s5_bulk_backlog"
REQUESTS_ENV = "SWITCHYARD_BENCH_S5_REQUESTS"
DEFAULT_REQUESTS = 5_000_000
FILE_REQUESTS = 50_000  # OpenAI's per-batch limit
PROMPT_BYTES = 1_000
PROMPT_VARIANTS = 101
PIECE_LINES = 256  # lines per body piece sent
UPLOAD_CLIENTS = 2  # the gateway runs two workers
BULK_MAX_TOKENS = 16
INTERACTIVE_CLIENTS = 4
INTERACTIVE_PROMPT_TOKENS = 32
INTERACTIVE_MAX_TOKENS = 16
TTFT_WINDOW_S = 30.0
DRAIN_WINDOW_S = 20.0
BACKLOG_START_TIMEOUT_S = 60.0  # for the restarted dispatcher's first finished entries
CANCEL_WAIT_S = 60.0
INTERACTIVE_TEAM, BULK_TEAM = "chat", "batch"
TEAMS = {INTERACTIVE_TEAM: 1.0, BULK_TEAM: 1.0}
MIB = 1 << 20


def requests_from_env() -> int:
    return int(os.environ.get(REQUESTS_ENV, DEFAULT_REQUESTS))


def with_blob_dir(config: SwitchyardConfig) -> SwitchyardConfig:
    """`config` storing blobs under its var dir (the caller deletes them: ~1 GB per 1 M requests)."""
    bulk = config.bulk.model_copy(update={"blob_dir": str(config.var_path / "blobs")})
    return config.model_copy(update={"bulk": bulk})


# -- Part A: ingestion ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemorySample:
    requests: int  # ingested when sampled
    gateway_rss: int  # bytes, summed over the gateway's processes
    gateway_hwm: int
    redis_used: int
    redis_peak: int


@dataclass(slots=True)
class UploadTally:
    """What the upload clients have sent so far, and memory after every file."""

    requests: int = 0
    bytes: int = 0
    samples: list[MemorySample] = field(default_factory=list)


def _prompts() -> list[bytes]:
    """About PROMPT_BYTES of plain words (nothing JSON must escape), a little different each."""
    words = b"river signal lantern quiet copper meadow orbit paper harbor ember violet granite willow".split()
    prompts = []
    for seed in range(PROMPT_VARIANTS):
        state, text = seed + 1, b"Summarise:"
        while len(text) < PROMPT_BYTES:
            state = (state * 1103515245 + 12345) % 2**31
            text += b" " + words[state % len(words)]
        prompts.append(text[:PROMPT_BYTES])
    return prompts


def _batch_pieces(first: int, count: int, prompts: list[bytes]) -> Iterator[bytes]:
    """Native lines first..first+count-1, PIECE_LINES at a time; each line numbers its prompt."""
    for start in range(first, first + count, PIECE_LINES):
        yield b"".join(
            b'{"custom_id": "r%d", "prompt": "%d %s", "max_tokens": %d}\n'
            % (n, n, prompts[n % len(prompts)], BULK_MAX_TOKENS)
            for n in range(start, min(start + PIECE_LINES, first + count))
        )


async def _multipart(
    boundary: str, fields: dict[str, str], pieces: Iterator[bytes], tally: UploadTally
) -> AsyncIterator[bytes]:
    """A multipart/form-data body: the text fields, then the file part streamed from `pieces`."""
    head = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()
    )
    head += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="batch.jsonl"\r\n'
    yield (head + "Content-Type: application/jsonl\r\n\r\n").encode()
    for piece in pieces:
        tally.bytes += len(piece)
        yield piece
    yield f"\r\n--{boundary}--\r\n".encode()


def _group_memory(pgid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes summed over the processes of group `pgid` (uvicorn and workers)."""
    rss = hwm = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if int(text[text.rindex(")") + 2 :].split()[2]) != pgid:
                continue
            status = (stat.parent / "status").read_text()
        except (OSError, ValueError):  # a process that exited meanwhile
            continue
        values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss += int(values.get("VmRSS", "0 kB").split()[0]) * 1024
        hwm += int(values.get("VmHWM", "0 kB").split()[0]) * 1024
    return rss, hwm


def _sample(requests: int, pgid: int, info: redis.Redis) -> MemorySample:
    """Memory now. Redis's `used_memory_peak` also counts what it held before `start_stack`
    flushed it (an earlier run's data, loaded from its append-only file): compare `used_memory`."""
    memory: dict[str, int] = info.info("memory")  # type: ignore[assignment]
    return MemorySample(requests, *_group_memory(pgid), memory["used_memory"], memory["used_memory_peak"])


async def _ingest(stack: Stack, model: str, headers: dict[str, str], total: int) -> tuple[float, UploadTally]:
    """Upload `total` requests; the seconds it took, and what was sent."""
    assert stack.gateway is not None and stack.gateway.pid is not None
    pgid, prompts = stack.gateway.pid, _prompts()
    info = sync_redis_client(stack.config, "admin")
    files = iter(range(0, total, FILE_REQUESTS))
    tally = UploadTally(samples=[_sample(0, pgid, info)])  # the first sample: before any upload

    async def client_loop(client: httpx.AsyncClient) -> None:
        for first in files:  # shared: each file goes to whichever client is free
            count = min(FILE_REQUESTS, total - first)
            boundary = uuid.uuid4().hex
            body = _multipart(
                boundary, {"model": model, "deadline": "24h"}, _batch_pieces(first, count, prompts), tally
            )
            content_type = f"multipart/form-data; boundary={boundary}"
            reply = await client.post("/v1/batches", content=body, headers={"Content-Type": content_type})
            if reply.status_code != 202 or reply.json()["counts"]["total"] != count:
                raise RuntimeError(f"upload of requests {first}.. refused: HTTP {reply.status_code} {reply.text[:500]}")
            tally.requests += count
            tally.samples.append(_sample(tally.requests, pgid, info))

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=None) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(UPLOAD_CLIENTS)))
    info.close()
    return time.perf_counter() - started, tally


def _memory_rows(samples: list[MemorySample], total: int) -> list[dict[str, object]]:
    rows = []
    for share in (0.0, 0.1, 0.5, 1.0):
        sample = next(s for s in samples if s.requests >= share * total)
        rows.append({"case": f"memory at {share:.0%}", "requests": sample.requests,
                     "gateway_rss_mb": sample.gateway_rss / MIB, "gateway_hwm_mb": sample.gateway_hwm / MIB,
                     "redis_used_mb": sample.redis_used / MIB, "redis_peak_mb": sample.redis_peak / MIB})  # fmt: skip
    return rows


# -- Part B: interactive beside the backlog ------------------------------------------------


@dataclass(frozen=True, slots=True)
class BacklogCounts:
    batches: int
    ended: int  # batches in a final status
    total: int  # entries
    finished: int  # done + failed + expired
    accounted: bool  # every ended batch's entries all done, failed or expired


async def _backlog(client: httpx.AsyncClient) -> BacklogCounts:
    """The bulk team's batches summed, page by page through GET /v1/batches."""
    batches = ended = total = finished = 0
    accounted, after = True, None
    while True:
        params: dict[str, str | int] = {"limit": 100, **({"after": after} if after else {})}
        page = (await client.get("/v1/batches", params=params)).raise_for_status().json()
        for batch in page["data"]:
            counts = batch["counts"]
            done = counts["done"] + counts["failed"] + counts["expired"]
            batches, total, finished = batches + 1, total + counts["total"], finished + done
            if batch["status"] in ("completed", "expired", "cancelled", "failed"):
                ended += 1
                accounted = accounted and done == counts["total"]
        if not page["has_more"]:
            return BacklogCounts(batches, ended, total, finished, accounted)
        after = page["last_id"]


async def _ttfts(
    url: str, model: str, headers: dict[str, str], prompts: list[str]
) -> tuple[list[float], dict[str, int]]:
    """Closed-loop interactive clients for TTFT_WINDOW_S: (times to first token, count per error)."""
    traces: list[StreamTrace] = []

    async def client_loop(client: httpx.AsyncClient, prompt: str) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": INTERACTIVE_MAX_TOKENS}
        while True:
            trace = StreamTrace(started=0.0)
            traces.append(trace)
            await stream_generate(client, url, body, trace)
            if trace.error is not None:
                await asyncio.sleep(0.2)

    async with httpx.AsyncClient(timeout=None, headers=headers) as client:
        tasks = [asyncio.create_task(client_loop(client, p)) for p in prompts]
        await asyncio.sleep(TTFT_WINDOW_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    ttfts = [t.ttft for t in traces if t.ttft is not None and t.error is None]
    return ttfts, dict(Counter(t.error[:300] for t in traces if t.error is not None))


def _ttft_row(
    case: str, ttfts: list[float], errors: dict[str, int], bulk_ended_per_s: float | None
) -> dict[str, object]:
    return {"case": case, "requests": len(ttfts), "errors": sum(errors.values()),
            "ttft_p50_ms": round(percentile(ttfts, 50) * 1000, 1),
            "ttft_p99_ms": round(percentile(ttfts, 99) * 1000, 1), "bulk_ended_per_s": bulk_ended_per_s}  # fmt: skip


async def _wait_for(
    client: httpx.AsyncClient, done: Callable[[BacklogCounts], bool], timeout_s: float
) -> BacklogCounts:
    """Poll the backlog until `done(counts)` or the timeout; the last counts."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = await _backlog(client)
        if done(counts) or time.monotonic() >= deadline:
            return counts
        await asyncio.sleep(1.0)


async def _scenario(stack: Stack, model: str, teams: dict[str, dict[str, str]], total: int) -> dict[str, object]:
    url = stack.gateway_url
    tokenizer = load_tokenizer(stack.config, model)
    prompts = [prompt_of(tokenizer, INTERACTIVE_PROMPT_TOKENS, seed=500 + i) for i in range(INTERACTIVE_CLIENTS)]
    chat = teams[INTERACTIVE_TEAM]
    async with httpx.AsyncClient(timeout=None, headers=chat) as warm:
        for prompt in prompts:  # the first requests compile and allocate; keep them out of the window
            await stream_generate(warm, url, {"model": model, "prompt": prompt, "max_tokens": INTERACTIVE_MAX_TOKENS})
    alone, alone_errors = await _ttfts(url, model, chat, prompts)

    assert stack.dispatcher is not None
    stack.dispatcher.stop()  # the backlog waits while it arrives
    seconds, upload = await _ingest(stack, model, teams[BULK_TEAM], total)
    samples = upload.samples
    rows: list[dict[str, object]] = [
        {"case": "ingest", "requests": total, "files": -(-total // FILE_REQUESTS), "seconds": seconds,
         "requests_per_s": round(total / seconds), "mb_per_s": upload.bytes / MIB / seconds},
        *_memory_rows(samples, total),
    ]  # fmt: skip

    async with httpx.AsyncClient(base_url=url, timeout=None, headers=teams[BULK_TEAM]) as bulk:
        stack.start_dispatcher()
        started = await _wait_for(bulk, lambda c: c.finished > 0, BACKLOG_START_TIMEOUT_S)
        before = time.perf_counter()
        backlog, backlog_errors = await _ttfts(url, model, chat, prompts)
        during = await _backlog(bulk)
        between = time.perf_counter()
        await asyncio.sleep(DRAIN_WINDOW_S)
        drained = await _backlog(bulk)
        drain_s = time.perf_counter() - between
        for batch_id in await _batch_ids(bulk):
            (await bulk.post(f"/v1/batches/{batch_id}/cancel")).raise_for_status()
        cancel_started = time.perf_counter()
        final = await _wait_for(bulk, lambda c: c.ended == c.batches, CANCEL_WAIT_S)
        cancel_s = time.perf_counter() - cancel_started

    during_rate = (during.finished - started.finished) / (between - before)
    rows += [
        _ttft_row("ttft, no backlog", alone, alone_errors, None),
        _ttft_row("ttft, backlog", backlog, backlog_errors, during_rate),
        {"case": "drain, no interactive", "seconds": drain_s,
         "bulk_ended_per_s": (drained.finished - during.finished) / drain_s},
        {"case": "cancel all", "requests": final.finished - drained.finished, "seconds": cancel_s,
         "bulk_ended_per_s": (final.finished - drained.finished) / cancel_s},
    ]  # fmt: skip
    first, last = next(s for s in samples if s.requests >= 0.1 * total), samples[-1]
    p99_alone = percentile(alone, 99)
    meta = {
        "requests": total,
        "ingest_requests_per_s": round(total / seconds),
        "ingest_target_per_s": 20_000,
        "gateway_rss_ratio_100_over_10": last.gateway_rss / first.gateway_rss,
        "gateway_hwm_ratio_100_over_10": last.gateway_hwm / first.gateway_hwm,
        "redis_used_ratio_100_over_10": last.redis_used / first.redis_used,
        "ttft_p99_ratio": percentile(backlog, 99) / p99_alone if p99_alone else float("inf"),
        "ttft_p50_ratio": percentile(backlog, 50) / percentile(alone, 50) if alone else float("inf"),
        "target_ttft_p99_ratio": 1.2,
        "bulk_entries_before_ttft_window": started.finished,
        "cancel": {"waited_s": round(cancel_s, 1), "batches": final.batches, "ended": final.ended,
                   "ended_accounted": final.accounted, "entries": final.total, "finished": final.finished},
        "interactive_errors": {"no backlog": alone_errors, "backlog": backlog_errors},
        "interactive_clients": INTERACTIVE_CLIENTS,
        "ttft_window_s": TTFT_WINDOW_S,
        "memory_samples": [
            {"requests": s.requests, "gateway_rss_mb": round(s.gateway_rss / MIB, 1),
             "redis_used_mb": round(s.redis_used / MIB, 2)} for s in samples
        ],
    }  # fmt: skip
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


async def _batch_ids(client: httpx.AsyncClient) -> list[str]:
    ids: list[str] = []
    while True:
        params: dict[str, str | int] = {"limit": 100, **({"after": ids[-1]} if ids else {})}
        page = (await client.get("/v1/batches", params=params)).raise_for_status().json()
        ids += [batch["id"] for batch in page["data"]]
        if not page["has_more"]:
            return ids


def run(stack: Stack, model: str, teams: dict[str, dict[str, str]], total: int | None = None) -> dict[str, object]:
    """`stack`: running, with `with_blob_dir`'s config; `teams`: headers of `chat` and `batch`."""
    return asyncio.run(_scenario(stack, model, teams, total or requests_from_env()))
