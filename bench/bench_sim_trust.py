"""Sim trust — the simulator against the live CPU stack, in wall-clock time.

One trace through the live CPU stack (Redis, tritonserver, gateway; one server of the `small`
model) and through the simulator (one `SimServer`, the same engine configuration), comparing
time to first token and the gaps between tokens as ratios, simulated over live.

The cost model is the CPU engine's own: `LLMEngine.step` timed on the same model and fitted
(`simulator.cpu_profile`), plus what the serving path adds per step and per stream (one stream,
then six) and before a first token (a calibration trace of its own, live against simulated),
measured on the live stack before the trace. The trace itself is never used to fit anything.

Tolerances (`within` in the table): the lower quartile of TTFT and the median of each reply's
mean gap between tokens within 50% (or 20 ms), the largest mean gap within 75%. On a shared
two-core machine the gateway and Triton add one-sided delays of up to hundreds of milliseconds
to some first tokens (the small model's steps take ~1 ms), so TTFT is compared where the engine
sets it, at the lower quartile. A wrong cost model or scheduler would be off by multiples; a
burst of load from elsewhere can be too, which is why this is a benchmark and not a test (the
scheduling itself is tested exactly, in simulated time: tests/simulator/test_trust.py).

The simulator replays with prefix caching off: its prompts are all token 0 and would hit each
other's blocks (a 400-token prompt read in half the steps), while the live prompts share none.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import asdict, replace

import httpx

from bench.live import (
    StreamTrace,
    engine_config_of,
    load_tokenizer,
    prompt_of,
    stream_generate,
)
from config.settings import EngineSpec, SwitchyardConfig
from engine.config import EngineConfig
from report.result_files import write_result
from simulator.cost_model import LinearCost, fit_linear
from simulator.cpu_profile import profile_cpu_engine
from simulator.trace_replay import ReplayResult, TraceRequest, replay
from stack.local_stack import Stack
from stack.measured_stack import measured_config

NAME = "sim_trust"
POOL = "trust"  # the bench pool, and the team whose key calls it
# (arrival offset s, prompt tokens, reply tokens): 12 requests over 4.4 s, replies overlapping,
# prompts from chat to page.
TRACE = [(0.4 * i, (48, 200, 32, 400, 64, 120)[i % 6], (160, 120, 200, 100)[i % 4]) for i in range(12)]
CALIBRATION_TOKENS = 120
CALIBRATION_TRACE = [(0.3 * i, (32, 300, 100)[i % 3], (140, 90)[i % 2]) for i in range(12)]
Shape = list[tuple[float, int, int]]


def trust_config(base: SwitchyardConfig) -> SwitchyardConfig:
    """`base` with one server of the `small` model as pool `POOL`, whose every step's tokens go
    out as they come, so the client sees the step rate (the cost of streaming each token is
    part of what the calibration measures)."""
    config = measured_config(base, {POOL: ("small", EngineSpec())}, {POOL: 1.0})
    pool = config.pools[POOL].model_copy(update={"stream_interval_ms": 0, "max_stream_responses_per_s": 10_000})
    return config.model_copy(update={"pools": {POOL: pool}})


def mean_gap(trace: StreamTrace) -> float:
    """A reply's mean gap between tokens, first to last. Deltas reach the client in bursts
    (the gateway and HTTP coalesce what is ready), so single gaps say little; their mean over a
    reply is the step rate the person sees."""
    return (trace.event_times[-1] - trace.event_times[0]) / (trace.completion_tokens - 1)


async def _run_live(url: str, headers: dict[str, str], requests: list[tuple[float, str, int]]) -> list[StreamTrace]:
    async def one(client: httpx.AsyncClient, offset: float, prompt: str, reply: int) -> StreamTrace:
        await asyncio.sleep(offset)
        body = {"model": POOL, "prompt": prompt, "max_tokens": reply, "ignore_eos": True}
        return await stream_generate(client, url, body)

    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        traces = await asyncio.gather(*(one(client, *r) for r in requests))
    for trace in traces:
        if trace.error is not None:
            raise RuntimeError(f"a live request failed: {trace.error}")
    return list(traces)


def run_live(stack: Stack, headers: dict[str, str], requests: list[tuple[float, str, int]]) -> list[StreamTrace]:
    """Stream every (offset, prompt, reply tokens) request through the gateway, each sent at
    its offset from now."""
    return asyncio.run(_run_live(stack.gateway_url, headers, requests))


def run_both(
    stack: Stack, config: SwitchyardConfig, headers: dict[str, str], shape: Shape, seed: int, cost: LinearCost
) -> tuple[list[StreamTrace], ReplayResult]:
    """The same requests through the live stack and through one simulated server."""
    tokenizer = load_tokenizer(config, POOL)
    prompts = [prompt_of(tokenizer, n, seed=seed + i) for i, (_, n, _) in enumerate(shape)]
    traces = run_live(stack, headers, [(t, p, r) for (t, _, r), p in zip(shape, prompts, strict=True)])
    requests = [TraceRequest(t, len(tokenizer.encode(p).ids), r) for (t, _, r), p in zip(shape, prompts, strict=True)]
    return traces, replay(requests, replay_config(config), cost)


def replay_config(config: SwitchyardConfig) -> EngineConfig:
    """The pool's engine as the simulator replays it: without prefix caching (module docstring)."""
    return replace(engine_config_of(config.pools[POOL].engine), enable_prefix_caching=False)


def calibrate(stack: Stack, config: SwitchyardConfig, headers: dict[str, str]) -> tuple[LinearCost, float]:
    """The cost model (engine profile + serving path per step and per stream, from 1 and 6
    streams) and the first-token overhead: per request before its first token (gateway,
    admission, tokenizing, on a busy host), live TTFT less simulated TTFT over a calibration
    trace of its own, at the lower quartile."""
    engine = fit_linear(profile_cpu_engine(config.model_dir(POOL), engine_config_of(config.pools[POOL].engine)))
    tokenizer = load_tokenizer(config, POOL)
    prompt = prompt_of(tokenizer, 32, seed=900)
    context = len(tokenizer.encode(prompt).ids) + CALIBRATION_TOKENS // 2
    run_live(stack, headers, [(0.0, prompt, CALIBRATION_TOKENS)])  # warm-up: first-request costs
    alone = [run_live(stack, headers, [(0.0, prompt, CALIBRATION_TOKENS)])[0] for _ in range(5)]
    together = run_live(stack, headers, [(0.0, prompt, CALIBRATION_TOKENS)] * 6)
    measured = {1: statistics.median(mean_gap(t) for t in alone), 6: statistics.median(mean_gap(t) for t in together)}
    predicted = {n: engine.step_s(0, n, n * context) for n in (1, 6)}
    per_stream = max(0.0, ((measured[6] - predicted[6]) - (measured[1] - predicted[1])) / 5)
    per_step = max(0.0, measured[1] - predicted[1] - per_stream)
    cost = LinearCost(engine.base_s + per_step, engine.per_token_s + per_stream, engine.per_context_token_s)
    live, simulated = run_both(stack, config, headers, CALIBRATION_TRACE, 500, cost)
    differences = [t.ttft - sim for t, sim in zip(live, simulated.ttft_s, strict=True) if t.ttft is not None]
    return cost, max(0.0, quartile(differences))


def run(stack: Stack, config: SwitchyardConfig, headers: dict[str, str]) -> dict[str, object]:
    """Calibrate on the live stack `trust_config` describes, replay `TRACE` through both,
    compare; writes the result."""
    cost, overhead_s = calibrate(stack, config, headers)
    live_traces, simulated = run_both(stack, config, headers, TRACE, 0, cost)
    live_ttft = [t.ttft for t in live_traces if t.ttft is not None]
    sim_ttft = [ttft + overhead_s for ttft in simulated.ttft_s]
    live_gaps = [mean_gap(t) for t in live_traces if len(t.event_times) >= 3]
    sim_gaps = [statistics.mean(gaps) for gaps in simulated.gaps_s]
    compared = (
        ("TTFT lower quartile", quartile(live_ttft), quartile(sim_ttft), 0.5),
        ("mean gap, median reply", statistics.median(live_gaps), statistics.median(sim_gaps), 0.5),
        ("mean gap, largest", max(live_gaps), max(sim_gaps), 0.75),
    )
    rows: list[dict[str, object]] = [
        {
            "measure": measure,
            "live_ms": round(live * 1e3, 2),
            "sim_ms": round(sim * 1e3, 2),
            "sim_over_live": round(sim / live, 3),
            "tolerance": f"±{rel:.0%} or 20 ms",
            "within": near(sim, live, rel),
        }
        for measure, live, sim, rel in compared
    ]
    meta: dict[str, object] = {
        "agrees": all(row["within"] for row in rows),
        "cost": asdict(cost),
        "first_token_overhead_s": overhead_s,
        "live_ttft_s": live_ttft,
        "sim_ttft_s": sim_ttft,
        "live_mean_gap_s": live_gaps,
        "sim_mean_gap_s": sim_gaps,
        "replies_with_gaps": f"{len(live_gaps)} of {len(TRACE)} live",
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


def near(sim: float, measured: float, rel: float, abs_s: float = 0.02) -> bool:
    return abs(sim - measured) <= max(rel * measured, abs_s)


def quartile(values: list[float]) -> float:
    """The lower quartile: the host's hiccups only ever add delay, so this is where the engine,
    not the scheduling of a shared machine, sets the first token."""
    return statistics.quantiles(values, n=4)[0]
