"""Serving-path overhead: what gateway + Triton cost on top of the engine itself.

Always the `small` model, 16 concurrent streams, 200-token prompts, 200-token replies
(`ignore_eos`). Tokens/s through the gateway and Triton versus the same engine driven
in-process on the same requests; target ≥ 0.8. Also the added latency per token (the mean gap
between deltas seen by a client, live minus in-process).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import httpx

from bench.common import write_result
from bench.live import StreamTrace, load_tokenizer, prompt_of, stream_generate
from config.settings import SwitchyardConfig
from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams

NAME = "serving_overhead"
STREAMS = 16
PROMPT_TOKENS = 200
REPLY_TOKENS = 200


def _prompts(config: SwitchyardConfig, model: str) -> list[str]:
    tokenizer = load_tokenizer(config, model)
    return [prompt_of(tokenizer, PROMPT_TOKENS, seed=900 + i) for i in range(STREAMS)]


def in_process(model_dir: Path, engine_config: EngineConfig, prompt_ids: list[list[int]]) -> dict[str, float]:
    """The engine on its own loop thread, consumed by threads as fast as it writes."""
    loop = EngineLoop(LLMEngine.from_pretrained(model_dir, engine_config))
    loop.start()
    try:
        started = time.perf_counter()
        streams = [
            loop.submit(
                EngineRequest(
                    request_id=f"inproc-{i}",
                    prompt_token_ids=tuple(ids),
                    sampling=SamplingParams(max_tokens=REPLY_TOKENS, ignore_eos=True),
                )
            )
            for i, ids in enumerate(prompt_ids)
        ]
        gaps: list[float] = []
        tokens = 0

        def consume(index: int) -> None:
            nonlocal tokens
            last = None
            while True:
                out = streams[index].wait(timeout=60)
                if out is None:
                    raise RuntimeError("engine stalled")
                now = time.perf_counter()
                if out.new_token_ids:
                    tokens += len(out.new_token_ids)
                    if last is not None:
                        gaps.append((now - last) / len(out.new_token_ids))
                    last = now
                if out.finished:
                    return

        async def consume_all() -> None:
            await asyncio.gather(*(asyncio.to_thread(consume, i) for i in range(len(streams))))

        asyncio.run(consume_all())
        wall = time.perf_counter() - started
    finally:
        loop.stop(timeout=10)
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "mean_token_gap_ms": statistics.mean(gaps) * 1000,
    }


async def _live(url: str, model: str, prompts: list[str], headers: dict[str, str]) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=None, headers=headers) as client:
        started = time.perf_counter()
        traces: list[StreamTrace] = await asyncio.gather(
            *(
                stream_generate(
                    client, url, {"model": model, "prompt": p, "max_tokens": REPLY_TOKENS, "ignore_eos": True}
                )
                for p in prompts
            )
        )
        wall = time.perf_counter() - started
    errors = [t.error for t in traces if t.error]
    if errors:
        raise RuntimeError(f"live requests failed: {errors[:3]}")
    tokens = sum(t.completion_tokens for t in traces)
    per_token = [gap / n for t in traces for gap, n in zip(t.gaps(), t.event_tokens[1:], strict=False)]
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "mean_token_gap_ms": statistics.mean(per_token) * 1000,
    }


def run(
    url: str,
    model: str,
    model_dir: Path,
    engine_config: EngineConfig,
    config: SwitchyardConfig,
    headers: dict[str, str],
) -> dict[str, object]:
    prompts = _prompts(config, model)
    tokenizer = load_tokenizer(config, model)
    prompt_ids = [tokenizer.encode(p).ids for p in prompts]
    asyncio.run(_live(url, model, prompts[:2], headers))  # warm the path once
    live = asyncio.run(_live(url, model, prompts, headers))
    local = in_process(model_dir, engine_config, prompt_ids)
    ratio = live["tokens_per_s"] / local["tokens_per_s"]
    rows = [
        {
            "path": "in-process engine",
            "tokens": local["tokens"],
            "wall_s": round(local["wall_s"], 2),
            "tokens_per_s": round(local["tokens_per_s"], 1),
            "mean_token_gap_ms": round(local["mean_token_gap_ms"], 2),
        },
        {
            "path": "gateway + triton",
            "tokens": live["tokens"],
            "wall_s": round(live["wall_s"], 2),
            "tokens_per_s": round(live["tokens_per_s"], 1),
            "mean_token_gap_ms": round(live["mean_token_gap_ms"], 2),
        },
    ]
    meta = {
        "throughput_ratio": ratio,
        "target": 0.8,
        "added_latency_per_token_ms": live["mean_token_gap_ms"] - local["mean_token_gap_ms"],
        "streams": STREAMS,
        "prompt_tokens": PROMPT_TOKENS,
        "reply_tokens": REPLY_TOKENS,
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
