"""What the tiers bench measures before its load (`bench/bench_tiers.py`): a short priority
request's time to first token on the idle stack, and how many long replies a second the pool
serves when every KV slot is busy."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import httpx

from bench.live import StreamTrace, stream_generate
from bench.tier_mix import LONG, SHORT, PromptFor

WARM_UP_REQUESTS = 2
REFUSED_PAUSE_S = 0.05


async def idle_ttfts(
    client: httpx.AsyncClient, url: str, model: str, prompts: list[str], request_class: str = "priority"
) -> list[float]:
    """Short requests one after another on the idle stack, the first `WARM_UP_REQUESTS` not
    counted: their times to first token (s)."""
    ttfts: list[float] = []
    for i, prompt in enumerate(prompts):
        body = {"model": model, "prompt": prompt, "max_tokens": SHORT.max_tokens, "ignore_eos": True,
                "class": request_class}  # fmt: skip
        trace = await stream_generate(client, url, body)
        if trace.error is not None or trace.ttft is None:
            raise RuntimeError(f"the idle probe failed: {trace.error}")
        if i >= WARM_UP_REQUESTS:
            ttfts.append(trace.ttft)
    return ttfts


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the pool served with every slot busy, and how often a loop was refused meanwhile."""

    served_per_s: float
    refused: int


async def served_per_s(
    clients: dict[str, tuple[httpx.AsyncClient, int]],
    url: str,
    model: str,
    prompt_for: PromptFor,
    warm_up_s: float,
    window_s: float,
) -> Calibration:
    """Long replies completed a second while `clients[team] = (client, loops)` closed loops
    (`default` tier) keep every KV slot busy: those that end within `window_s` after `warm_up_s`."""
    start = time.perf_counter()
    ends: list[float] = []
    failures: list[str] = []
    refused: list[str] = []

    async def loop(client: httpx.AsyncClient, seed: int) -> None:
        n = 0
        while True:
            body = {"model": model, "prompt": prompt_for(LONG, seed * 1_000 + n), "max_tokens": LONG.max_tokens,
                    "ignore_eos": True, "class": "interactive"}  # fmt: skip
            trace = StreamTrace(started=0.0)
            await stream_generate(client, url, body, trace)
            n += 1
            if trace.error is not None and trace.error.startswith(("HTTP 429", "HTTP 503")):
                # A loop's next request can reach admission before its last lease is released:
                # the team is over its share for that moment.
                refused.append(trace.error)
                await asyncio.sleep(REFUSED_PAUSE_S)
            elif trace.error is not None:
                failures.append(trace.error)
                return
            elif trace.finished is not None:
                ends.append(trace.finished - start)

    seeds = iter(range(1, 1_000))
    tasks = [asyncio.create_task(loop(client, next(seeds))) for client, loops in clients.values() for _ in range(loops)]
    await asyncio.sleep(warm_up_s + window_s)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if failures:
        raise RuntimeError(f"calibration: {len(failures)} requests failed, the first: {failures[0]}")
    counted = sum(1 for end in ends if warm_up_s <= end <= warm_up_s + window_s)
    return Calibration(counted / window_s, len(refused))


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1) if values else 0.0
