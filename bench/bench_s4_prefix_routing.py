"""S4 — the same 9,000 tokens, read again and again.

Requests share a 9,000-token prefix (one of PREFIXES per phase) with distinct 200-token
tails, on a pool of four servers, one request at a time. Two phases in one run, each with
prefixes of its own:

    router   through the gateway: its router picks the server
    random   straight to a server chosen at random (tritonclient, the gateway bypassed): the
             baseline, sent in the gateway's cache namespace (the team) like the router's

Which server served a request: the one whose `nv_inference_count` of `llm` went up (one
request at a time, so exactly one does). A request lands on a holder when that server served
its prefix earlier in the run; the first request of a prefix cannot, so the shares leave it
out. The reply's `cached_tokens` says whether the engine really reused the prefix there.

    prefixes p0..p5, rounds r0..r4:   p0 p1 .. p5 | p0 p1 .. p5 | ...   (r0: every prefix new)
    cold = a request on a server that had not served its prefix; warm = on one that had

Targets: time to first token p50 warm <= 0.2x cold; >= 90% of routed requests on a holder
(random routing: ~25% while one server holds a prefix, more as copies spread).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass

import httpx
from tritonclient.grpc.aio import InferenceServerClient

from bench.live import load_tokenizer, percentile, prompt_of, read_inference_count, stream_generate
from contracts.generation import GenerationRequest
from report.result_files import write_result
from router.triton_backend import TritonBackend
from stack.local_stack import Stack

NAME = "s4_prefix_routing"
TEAM = "bench"  # the gateway's cache namespace for this team's requests
PREFIX_TOKENS = 9000
TAIL_TOKENS = 200
PREFIXES = 6
ROUNDS = 5  # requests per prefix
MAX_TOKENS = 4
TARGET_RATIO = 0.2
TARGET_SHARE = 0.9
_COUNT_WAIT_S = 5.0  # for the served request to show in its server's metrics


@dataclass(frozen=True, slots=True)
class Landing:
    """Where one request went and how fast its first token came."""

    prefix: int
    server_id: str
    on_holder: bool  # the server had served this prefix earlier in the run
    first_of_prefix: bool  # no server held it yet
    holders: int  # servers holding the prefix when the request was sent
    cached_tokens: int
    ttft_s: float


def _counts(urls: dict[str, str]) -> dict[str, int]:
    return {server_id: read_inference_count(url) for server_id, url in urls.items()}


async def _served_by(urls: dict[str, str], before: dict[str, int]) -> tuple[str, dict[str, int]]:
    """The server that counted one more request since `before`, and the counts now."""
    deadline = time.monotonic() + _COUNT_WAIT_S
    while True:
        now = await asyncio.to_thread(_counts, urls)
        moved = {sid: now[sid] - before[sid] for sid in urls if now[sid] != before[sid]}
        if len(moved) == 1 and next(iter(moved.values())) == 1:
            return next(iter(moved)), now
        if moved:
            raise RuntimeError(f"one request sent, but the servers counted {moved}")
        if time.monotonic() > deadline:
            raise RuntimeError("no server counted the request")
        await asyncio.sleep(0.05)


class _Phase:
    """Holders per prefix, and the landings of one phase."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.counts = _counts(urls)
        self.holders: dict[int, set[str]] = {}
        self.landings: list[Landing] = []

    async def record(self, prefix: int, cached_tokens: int, ttft_s: float) -> None:
        server_id, self.counts = await _served_by(self.urls, self.counts)
        held = self.holders.setdefault(prefix, set())
        landing = Landing(prefix, server_id, server_id in held, not held, len(held), cached_tokens, ttft_s)
        self.landings.append(landing)
        held.add(server_id)


async def _direct(backend: TritonBackend, server_id: str, request: GenerationRequest) -> tuple[float, int]:
    """(time to first token, cached tokens) of one request streamed straight from a server."""
    started, ttft, cached = time.perf_counter(), None, 0
    async with contextlib.aclosing(backend.stream_on(server_id, request)) as deltas:
        async for delta in deltas:
            if delta.token_ids and ttft is None:
                ttft = time.perf_counter() - started
            if delta.usage is not None:
                cached = delta.usage.cached_tokens
    if ttft is None:
        raise RuntimeError(f"{server_id} wrote no token for {request.request_id}")
    return ttft, cached


def _prompts(stack: Stack, model: str, first_seed: int) -> list[list[str]]:
    """Per prefix, ROUNDS prompts: the shared prefix and a tail of their own."""
    tokenizer = load_tokenizer(stack.config, model)
    prompts = []
    for p in range(PREFIXES):
        prefix = prompt_of(tokenizer, PREFIX_TOKENS, seed=first_seed + 1000 * p)
        tails = [prompt_of(tokenizer, TAIL_TOKENS + 1, seed=first_seed + 1000 * p + 1 + r) for r in range(ROUNDS)]
        prompts.append([f"{prefix} {tail}" for tail in tails])
    return prompts


def _row(phase: str, landings: list[Landing], servers: int) -> dict[str, object]:
    counted = [x for x in landings if not x.first_of_prefix]
    on_holder = sum(x.on_holder for x in counted)
    cold = [x.ttft_s for x in landings if not x.on_holder]
    warm = [x.ttft_s for x in landings if x.on_holder]
    cold_p50, warm_p50 = percentile(cold, 50), percentile(warm, 50)
    return {
        "phase": phase,
        "requests": len(landings),
        "counted": len(counted),
        "on_holder": on_holder,
        "on_holder_share": on_holder / len(counted) if counted else 0.0,
        "random_expectation": sum(x.holders for x in counted) / servers / len(counted) if counted else 0.0,
        "cache_hits": sum(x.cached_tokens >= PREFIX_TOKENS - 32 for x in counted),
        "cold": len(cold),
        "warm": len(warm),
        "ttft_cold_p50_ms": round(cold_p50 * 1000, 1),
        "ttft_warm_p50_ms": round(warm_p50 * 1000, 1),
        "warm_over_cold": warm_p50 / cold_p50 if cold and warm else None,
    }


def _spread(landings: list[Landing]) -> dict[str, dict[str, int]]:
    """Per prefix, requests per server."""
    spread: dict[str, Counter[str]] = {}
    for x in landings:
        spread.setdefault(f"p{x.prefix}", Counter())[x.server_id] += 1
    return {prefix: dict(sorted(counter.items())) for prefix, counter in spread.items()}


async def _scenario(stack: Stack, model: str, headers: dict[str, str]) -> dict[str, object]:
    pool = stack.config.pools[model]
    server_ids = [f"{model}-{k}" for k in range(pool.target_copies)]
    urls = {sid: stack.metrics_url(model, k) for k, sid in enumerate(server_ids)}
    backend = TritonBackend({}, {}, headers=stack.config.triton_grpc_headers())
    for k, server_id in enumerate(server_ids):
        ports = stack.ports.ports(model, k)
        backend.add_target(server_id, InferenceServerClient(url=f"127.0.0.1:{ports.grpc}"), model)
    tokenizer = load_tokenizer(stack.config, model)
    url = stack.gateway_url
    try:
        async with httpx.AsyncClient(timeout=None, headers=headers) as client:
            # First requests allocate and compile; keep that out of the timings (own namespace).
            warmup = prompt_of(tokenizer, 64, seed=4)
            await stream_generate(client, url, {"model": model, "prompt": warmup, "max_tokens": MAX_TOKENS})
            for server_id in server_ids:
                request = GenerationRequest(f"s4-warmup-{server_id}", model, warmup, MAX_TOKENS, cache_namespace="w")
                await _direct(backend, server_id, request)

            routed = _Phase(urls)
            for r, prompts in _rounds(_prompts(stack, model, first_seed=40_000)):
                for p, prompt in enumerate(prompts):
                    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True}
                    trace = await stream_generate(client, url, body)
                    if trace.error is not None or trace.ttft is None:
                        raise RuntimeError(f"routed request p{p} r{r} failed: {trace.error}")
                    await routed.record(p, trace.usage.get("cached_tokens", 0), trace.ttft)

        rng = random.Random(4)
        randomly = _Phase(urls)
        for r, prompts in _rounds(_prompts(stack, model, first_seed=80_000)):
            for p, prompt in enumerate(prompts):
                request = GenerationRequest(
                    f"s4-random-p{p}-r{r}", model, prompt, MAX_TOKENS, ignore_eos=True, cache_namespace=TEAM
                )
                ttft, cached = await _direct(backend, rng.choice(server_ids), request)
                await randomly.record(p, cached, ttft)
    finally:
        await backend.close()

    rows = [
        _row("router (gateway)", routed.landings, len(server_ids)),
        _row("random (direct)", randomly.landings, len(server_ids)),
    ]
    router = rows[0]
    meta = {
        "servers": len(server_ids),
        "prefix_tokens": PREFIX_TOKENS,
        "tail_tokens": TAIL_TOKENS,
        "prefixes_per_phase": PREFIXES,
        "requests_per_prefix": ROUNDS,
        "ttft_warm_over_cold": router["warm_over_cold"],
        "target_ttft_ratio": TARGET_RATIO,
        "on_holder_share": router["on_holder_share"],
        "target_share": TARGET_SHARE,
        "random_on_holder_share": rows[1]["on_holder_share"],
        "router_spread": _spread(routed.landings),
        "random_spread": _spread(randomly.landings),
        "router_landings": [_landing_dict(x) for x in routed.landings],
        "random_landings": [_landing_dict(x) for x in randomly.landings],
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def _rounds(prompts: list[list[str]]) -> list[tuple[int, list[str]]]:
    """Round r: every prefix's r-th prompt, prefixes in order."""
    return [(r, [per_prefix[r] for per_prefix in prompts]) for r in range(ROUNDS)]


def _landing_dict(x: Landing) -> dict[str, object]:
    return {"prefix": x.prefix, "server": x.server_id, "on_holder": x.on_holder, "cached": x.cached_tokens,
            "ttft_ms": round(x.ttft_s * 1000, 1)}  # fmt: skip


def run(stack: Stack, model: str, headers: dict[str, str]) -> dict[str, object]:
    """`stack`: running `model`'s pool with four copies (`stack.measured_stack.with_copies`)."""
    return asyncio.run(_scenario(stack, model, headers))
