"""S1 — a ten-token answer stuck behind a long report.

Eight replies of 2,000 tokens decode on one server; then a 10-token request arrives. Its
end-to-end time is compared with the same request on the idle server, in the same run.
Target: ≤ 2× (static batching would make it wait for the 2,000-token replies: ~100×).

On the CPU target (`serving.target: cpu`) the same scenario also runs on the engine alone, in
process, so the table separates what the CPU engine's own step cost adds (a decode step of 9
streams costs more than one of 1 on a CPU; on a GPU it barely changes) from what the serving
path adds. On another target that comparison is skipped: the engine behind the stack is not
the one this process could run.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import httpx

from bench.common import write_result
from bench.live import load_tokenizer, prompt_of, start_streams, stop_streams, stream_generate
from config.settings import SwitchyardConfig
from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams

NAME = "s1_short_behind_long"
LONG_REPLIES = 8
LONG_TOKENS = 2000
SHORT_TOKENS = 10
REPEATS = 5


async def _short_e2e(client: httpx.AsyncClient, url: str, model: str, prompt: str) -> list[float]:
    times = []
    for _ in range(REPEATS):
        trace = await stream_generate(
            client, url, {"model": model, "prompt": prompt, "max_tokens": SHORT_TOKENS, "ignore_eos": True}
        )
        if trace.error or trace.e2e is None:
            raise RuntimeError(f"short request failed: {trace.error}")
        times.append(trace.e2e)
    return times


def engine_only(
    model_dir: Path, engine_config: EngineConfig, short_ids: list[int], long_ids: list[int]
) -> dict[str, float]:
    """Median e2e of the short request on the bare engine, idle and behind the long replies."""
    loop = EngineLoop(LLMEngine.from_pretrained(model_dir, engine_config))
    loop.start()

    def short(tag: str) -> list[float]:
        times = []
        for i in range(REPEATS):
            began = time.perf_counter()
            stream = loop.submit(
                EngineRequest(
                    f"short-{tag}-{i}", tuple(short_ids), SamplingParams(max_tokens=SHORT_TOKENS, ignore_eos=True)
                )
            )
            while not ((out := stream.wait(timeout=30)) is not None and out.finished):
                if out is None:
                    raise RuntimeError("engine stalled")
            times.append(time.perf_counter() - began)
        return times

    try:
        idle = short("idle")
        longs = [
            loop.submit(
                EngineRequest(f"long-{i}", tuple(long_ids), SamplingParams(max_tokens=LONG_TOKENS, ignore_eos=True))
            )
            for i in range(LONG_REPLIES)
        ]
        # Measure once every long reply is decoding (its first token out), not after a fixed time.
        for stream in longs:
            if stream.wait(timeout=60) is None:
                raise RuntimeError("engine stalled")
        loaded = short("loaded")
    finally:
        loop.stop(timeout=10)
    return {"idle": statistics.median(idle), "loaded": statistics.median(loaded)}


def engine_alone(config: SwitchyardConfig, model: str, engine_config: EngineConfig) -> dict[str, float] | None:
    """`engine_only` on the prompts the live scenario sends, or None when the stack does not
    serve on the CPU engine (`config.serving.target`), whose figures would then compare two
    different engines."""
    if config.serving.target != "cpu":
        return None
    tokenizer = load_tokenizer(config, model)
    short_ids = tokenizer.encode(prompt_of(tokenizer, 32, seed=1)).ids
    long_ids = tokenizer.encode(prompt_of(tokenizer, 64, seed=100)).ids
    return engine_only(config.model_dir(model), engine_config, short_ids, long_ids)


async def _scenario(
    url: str, model: str, config: SwitchyardConfig, headers: dict[str, str]
) -> tuple[list[dict[str, object]], dict[str, object]]:
    tokenizer = load_tokenizer(config, model)
    short_prompt = prompt_of(tokenizer, 32, seed=1)
    async with httpx.AsyncClient(timeout=None, headers=headers) as client:
        idle = await _short_e2e(client, url, model, short_prompt)
        traces, longs = start_streams(
            client,
            url,
            [
                {
                    "model": model,
                    "prompt": prompt_of(tokenizer, 64, seed=100 + i),
                    "max_tokens": LONG_TOKENS,
                    "ignore_eos": True,
                }
                for i in range(LONG_REPLIES)
            ],
        )
        await asyncio.sleep(2.0)  # the long replies are all decoding by now
        loaded = await _short_e2e(client, url, model, short_prompt)
        still_running = sum(not task.done() for task in longs)
        await stop_streams(longs)
    long_tokens = [t.completion_tokens for t in traces]
    ratio = statistics.median(loaded) / statistics.median(idle)
    rows: list[dict[str, object]] = [
        {"case": "idle server", "short_e2e_ms": round(statistics.median(idle) * 1000, 1)},
        {
            "case": f"behind {LONG_REPLIES}x{LONG_TOKENS}-token replies",
            "short_e2e_ms": round(statistics.median(loaded) * 1000, 1),
        },
        {"case": "ratio, live stack (target <= 2.0)", "short_e2e_ms": round(ratio, 2)},
    ]
    meta: dict[str, object] = {
        "ratio": ratio,
        "target": 2.0,
        "long_replies_still_running_during_measurement": still_running,
        "long_tokens_written_when_cancelled": long_tokens,
        "idle_e2e_s": idle,
        "loaded_e2e_s": loaded,
    }
    return rows, meta


def run(
    url: str, model: str, config: SwitchyardConfig, engine_config: EngineConfig, headers: dict[str, str]
) -> dict[str, object]:
    """The live scenario, then (on the CPU target only) the engine alone; writes the result."""
    rows, meta = asyncio.run(_scenario(url, model, config, headers))
    bare = engine_alone(config, model, engine_config)
    if bare is None:
        meta["engine_only"] = f"skipped: serving.target is {config.serving.target}, not the in-process CPU engine"
    else:
        rows.append({"case": "engine alone: idle", "short_e2e_ms": round(bare["idle"] * 1000, 1)})
        rows.append({"case": "engine alone: behind long replies", "short_e2e_ms": round(bare["loaded"] * 1000, 1)})
        rows.append({"case": "engine alone: ratio", "short_e2e_ms": round(bare["loaded"] / bare["idle"], 2)})
        meta["engine_only_ratio"] = bare["loaded"] / bare["idle"]
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
