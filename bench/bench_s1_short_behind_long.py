"""S1 — a ten-token answer stuck behind a long report, on both model sizes.

Six (then twelve) replies of 2,000 tokens decode on one server; then a 10-token request
arrives. Its end-to-end time and first-token time are compared with the same request on the
idle server, in the same run, on the small and the large model. Target: ≤ 2× (static batching
would make it wait for the 2,000-token replies: ~100×). Beside it, the long replies' p99 gap
between deltas while the short requests run, against the second before (their pace kept).

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

from bench.live import StreamTrace, load_tokenizer, percentile, prompt_of, start_streams, stop_streams, stream_generate
from config.settings import SwitchyardConfig
from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.request import EngineRequest, SamplingParams
from report.result_files import write_result

NAME = "s1_short_behind_long"
LONG_REPLIES = 6
LONG_COUNTS = (6, 12)
LONG_TOKENS = 2000
SHORT_TOKENS = 10
# Medians of this many: on two shared cores one short request in five meets a scheduling
# hiccup of tens of ms, which a median of five still shows. Their run is also the window of
# the long replies' gaps "during" (~1.5 s: ~300 gaps of twelve streams).
REPEATS = 25
# The long replies' pace alone, before the short requests: the window of their gaps "before".
# At 1 s (~200 gaps of twelve streams, so the p99 was the second largest) it ranged 43-247 ms
# across runs of the same case.
QUIET_S = 2.0


async def _shorts(
    client: httpx.AsyncClient, url: str, model: str, prompt: str, *, warm_up: bool = False
) -> list[StreamTrace]:
    """REPEATS short requests one after another (`warm_up`: one more first, not counted: a
    server's first request pays for loading what later ones find warm)."""
    traces = []
    for i in range(REPEATS + warm_up):
        trace = await stream_generate(
            client, url, {"model": model, "prompt": prompt, "max_tokens": SHORT_TOKENS, "ignore_eos": True}
        )
        if trace.error or trace.e2e is None or trace.ttft is None:
            raise RuntimeError(f"short request failed: {trace.error}")
        if not (warm_up and i == 0):
            traces.append(trace)
    return traces


def _median_ms(values: list[float | None]) -> float:
    return round(statistics.median(v for v in values if v is not None) * 1000, 1)


def engine_only(
    model_dir: Path,
    engine_config: EngineConfig,
    short_ids: list[int],
    long_ids: list[int],
    long_replies: int = LONG_REPLIES,
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
            for i in range(long_replies)
        ]
        # Measure once every long reply is decoding (its first token out), not after a fixed time.
        for stream in longs:
            if stream.wait(timeout=60) is None:
                raise RuntimeError("engine stalled")
        loaded = short("loaded")
    finally:
        loop.stop(timeout=10)
    return {"idle": statistics.median(idle), "loaded": statistics.median(loaded)}


def engine_alone(
    config: SwitchyardConfig, model: str, engine_config: EngineConfig, long_replies: int = LONG_REPLIES
) -> dict[str, float] | None:
    """`engine_only` on the prompts the live scenario sends, or None when the stack does not
    serve on the CPU engine (`config.serving.target`), whose figures would then compare two
    different engines."""
    if config.serving.target != "cpu":
        return None
    tokenizer = load_tokenizer(config, model)
    short_ids = tokenizer.encode(prompt_of(tokenizer, 32, seed=1)).ids
    long_ids = tokenizer.encode(prompt_of(tokenizer, 64, seed=100)).ids
    return engine_only(config.model_dir(model), engine_config, short_ids, long_ids, long_replies)


async def _case(
    url: str, model: str, config: SwitchyardConfig, headers: dict[str, str], long_replies: int
) -> dict[str, object]:
    """One size and count: the short request idle, then behind `long_replies` long ones."""
    tokenizer = load_tokenizer(config, model)
    short_prompt = prompt_of(tokenizer, 32, seed=1)
    async with httpx.AsyncClient(timeout=None, headers=headers) as client:
        idle = await _shorts(client, url, model, short_prompt, warm_up=True)
        bodies: list[dict[str, object]] = [
            {
                "model": model,
                "prompt": prompt_of(tokenizer, 64, seed=100 + i),
                "max_tokens": LONG_TOKENS,
                "ignore_eos": True,
            }
            for i in range(long_replies)
        ]
        traces, longs = start_streams(client, url, bodies)
        # Measure once every long reply is decoding (its first delta out), then QUIET_S of
        # their pace alone, then the short requests.
        deadline = time.perf_counter() + 120
        while not all(t.event_times for t in traces):
            if time.perf_counter() > deadline or any(t.error for t in traces):
                raise RuntimeError(f"long replies did not start: {[t.error for t in traces if t.error]}")
            await asyncio.sleep(0.02)
        quiet_from = time.perf_counter()
        await asyncio.sleep(QUIET_S)
        loaded_from = time.perf_counter()
        loaded = await _shorts(client, url, model, short_prompt)
        loaded_until = time.perf_counter()
        still_running = sum(not task.done() for task in longs)
        await stop_streams(longs)
    quiet_gaps = [g for t in traces for g in t.gaps(quiet_from, loaded_from)]
    loaded_gaps = [g for t in traces for g in t.gaps(loaded_from, loaded_until)]

    def pace(since: float, until: float) -> float:  # the long replies' tokens/s, all together
        arrivals = (zip(t.event_times, t.event_tokens, strict=True) for t in traces)
        tokens = sum(n for pairs in arrivals for at, n in pairs if since < at <= until)
        return round(tokens / (until - since), 1)

    idle_e2e = statistics.median(t.e2e for t in idle if t.e2e is not None)
    loaded_e2e = statistics.median(t.e2e for t in loaded if t.e2e is not None)
    return {
        "long_replies": long_replies,
        "idle_e2e_ms": _median_ms([t.e2e for t in idle]),
        "loaded_e2e_ms": _median_ms([t.e2e for t in loaded]),
        "ratio": round(loaded_e2e / idle_e2e, 2),
        "idle_ttft_ms": _median_ms([t.ttft for t in idle]),
        "loaded_ttft_ms": _median_ms([t.ttft for t in loaded]),
        "long_gap_p99_before_ms": round(percentile(quiet_gaps, 99) * 1000, 1),
        "long_gap_p99_during_ms": round(percentile(loaded_gaps, 99) * 1000, 1),
        "long_tokens_per_s_before": pace(quiet_from, loaded_from),
        "long_tokens_per_s_during": pace(loaded_from, loaded_until),
        "long_replies_still_running": still_running,
    }


def run(
    url: str, models: dict[str, str], config: SwitchyardConfig, engine_config: EngineConfig, headers: dict[str, str]
) -> dict[str, object]:
    """Every size (`models`: size -> the pool's model name) behind 6 and 12 long replies, the
    live stack then (on the CPU target only) the engine alone; writes the result. The
    headline ratio is the worst case's."""
    rows: list[dict[str, object]] = []
    for size, model in models.items():
        for long_replies in LONG_COUNTS:
            row: dict[str, object] = {"model": size, **asyncio.run(_case(url, model, config, headers, long_replies))}
            bare = engine_alone(config, model, engine_config, long_replies)
            if bare is not None:
                row["engine_alone_idle_ms"] = round(bare["idle"] * 1000, 1)
                row["engine_alone_loaded_ms"] = round(bare["loaded"] * 1000, 1)
                row["engine_alone_ratio"] = round(bare["loaded"] / bare["idle"], 2)
            rows.append(row)
    meta: dict[str, object] = {
        "ratio": max(float(row["ratio"]) for row in rows),  # type: ignore[arg-type]
        "target": 2.0,
        "short_tokens": SHORT_TOKENS,
        "long_tokens": LONG_TOKENS,
        "repeats": REPEATS,
        "quiet_s": QUIET_S,
        "express_max_tokens": engine_config.express_max_tokens,
    }
    if config.serving.target != "cpu":
        meta["engine_only"] = f"skipped: serving.target is {config.serving.target}, not the in-process CPU engine"
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
