"""The gRPC door's cost: the same streamed requests through the door (team key, admission,
routing, metering) and straight to Triton's `llm` (the inference key), side by side.

16 concurrent streams of 200-token prompts and 200-token greedy replies (`ignore_eos`), with
`tritonclient.grpc.aio` both ways; rounds alternate direct / door so both see the same machine.
Reported: tokens/s each way and their ratio (target >= 0.9) and time to the first response,
with 16 streams at once; and, one request at a time (nothing queued on either path), the
door's added latency: to the first response, and per response (the whole reply's time, door
minus direct, over its responses). With 16 at once the door's first responses come later (its
requests are admitted, tokenized and routed, then reach the engine one by one rather than
together) and its later gaps shorter, so the gaps of that run say little about the door.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput

from bench.live import load_tokenizer, prompt_of
from config.settings import SwitchyardConfig
from contracts.generation import GenerationRequest
from report.result_files import write_result
from router.triton_backend import LLM_MODEL, build_inputs

NAME = "grpc_door"
STREAMS = 16
PROMPT_TOKENS = 200
REPLY_TOKENS = 200
ROUNDS = 2
LONE = 6  # requests one at a time, each way


@dataclass(slots=True)
class Trace:
    started: float
    first: float | None = None
    arrivals: list[float] = field(default_factory=list)
    tokens: int = 0


def _door_inputs(prompt: str) -> list[Any]:
    values = [
        ("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
        ("max_tokens", np.array([REPLY_TOKENS], dtype=np.int32), "INT32"),
        ("ignore_eos", np.array([True]), "BOOL"),
    ]
    inputs = []
    for name, array, datatype in values:
        item = InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


async def _one(url: str, request: dict[str, Any], headers: dict[str, str]) -> Trace:
    client = triton_aio.InferenceServerClient(url)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield request

    trace = Trace(time.perf_counter())
    try:
        async for result, error in client.stream_infer(requests(), headers=headers):
            if error is not None:
                raise RuntimeError(str(error))
            now = time.perf_counter()
            count = len(result.as_numpy("output_token_ids"))
            if count:
                trace.first = trace.first or now
                trace.arrivals.append(now)
                trace.tokens += count
            if result.as_numpy("finish_reason")[0]:
                break
    finally:
        await client.close()
    return trace


async def _round(url: str, requests: list[dict[str, Any]], headers: dict[str, str]) -> dict[str, float]:
    started = time.perf_counter()
    traces = await asyncio.gather(*(_one(url, request, headers) for request in requests))
    wall = time.perf_counter() - started
    gaps = [b - a for t in traces for a, b in zip(t.arrivals, t.arrivals[1:], strict=False)]
    return {
        "tokens_per_s": sum(t.tokens for t in traces) / wall,
        "ttft_ms": 1000 * statistics.mean((t.first or t.started) - t.started for t in traces),
        "gap_ms": 1000 * statistics.mean(gaps) if gaps else 0.0,
        "responses": float(sum(len(t.arrivals) for t in traces)),
    }


def run(
    door_url: str,
    triton_url: str,
    pool: str,
    config: SwitchyardConfig,
    headers: dict[str, str],
    *,
    http_url: str | None = None,
) -> dict[str, Any]:
    """Direct and door rounds alternated; `headers` carry the team's key (the door's).
    `http_url`: the gateway's HTTP API, timed alone beside them (what the door adds to it)."""
    tokenizer = load_tokenizer(config, pool)
    prompts = [prompt_of(tokenizer, PROMPT_TOKENS, seed=700 + i) for i in range(STREAMS)]
    direct_requests = [
        {
            "model_name": LLM_MODEL,
            "inputs": build_inputs(GenerationRequest(f"direct-{i}", pool, p, REPLY_TOKENS, ignore_eos=True)),
            "request_id": f"direct-{i}",
        }
        for i, p in enumerate(prompts)
    ]
    door_requests = [{"model_name": pool, "inputs": _door_inputs(p)} for p in prompts]
    door_headers = {"authorization": headers["Authorization"]}
    direct_headers = config.triton_grpc_headers()
    asyncio.run(_round(triton_url, direct_requests[:2], direct_headers))  # warm both paths
    asyncio.run(_round(door_url, door_requests[:2], door_headers))
    measured: dict[str, list[dict[str, float]]] = {"direct": [], "door": []}
    for _ in range(ROUNDS):
        measured["direct"].append(asyncio.run(_round(triton_url, direct_requests, direct_headers)))
        measured["door"].append(asyncio.run(_round(door_url, door_requests, door_headers)))
    lone: dict[str, list[Trace]] = {"direct": [], "door": [], "http": []}
    for i in range(LONE):  # alternated, one request at a time
        lone["direct"].append(asyncio.run(_one(triton_url, direct_requests[i], direct_headers)))
        lone["door"].append(asyncio.run(_one(door_url, door_requests[i], door_headers)))
        if http_url is not None:
            lone["http"].append(asyncio.run(_http_one(http_url, pool, prompts[i], door_headers)))
    if not lone["http"]:
        del lone["http"]
    means = {
        variant: {k: statistics.mean(r[k] for r in rounds) for k in rounds[0]} for variant, rounds in measured.items()
    }
    direct, door = means["direct"], means["door"]
    rows: list[dict[str, Any]] = [
        {"path": f"{variant}, {STREAMS} at once", **values} for variant, values in means.items()
    ]
    alone = {variant: _lone(traces) for variant, traces in lone.items()}
    rows += [{"path": f"{variant}, one at a time", **values} for variant, values in alone.items()]
    meta = {
        "streams": STREAMS,
        "prompt_tokens": PROMPT_TOKENS,
        "reply_tokens": REPLY_TOKENS,
        "rounds": ROUNDS,
        "door_vs_direct_tokens_per_s": round(door["tokens_per_s"] / direct["tokens_per_s"], 3),
        "added_ttft_ms_alone": round(alone["door"]["ttft_ms"] - alone["direct"]["ttft_ms"], 3),
        "added_ms_per_response_alone": round(alone["door"]["ms_per_response"] - alone["direct"]["ms_per_response"], 3),
        **(
            {"door_minus_http_ttft_ms_alone": round(alone["door"]["ttft_ms"] - alone["http"]["ttft_ms"], 3)}
            if "http" in alone
            else {}
        ),
        "added_ttft_ms_16_at_once": round(door["ttft_ms"] - direct["ttft_ms"], 3),
        "target": ">= 0.9 of direct tokens/s",
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}


async def _http_one(url: str, pool: str, prompt: str, headers: dict[str, str]) -> Trace:
    """The same request through the gateway's HTTP API, streamed (SSE)."""
    body = {"model": pool, "prompt": prompt, "max_tokens": REPLY_TOKENS, "ignore_eos": True, "stream": True}
    trace = Trace(time.perf_counter())
    async with (
        httpx.AsyncClient(timeout=120) as client,
        client.stream("POST", f"{url}/v1/generate", json=body, headers=headers) as response,
    ):
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:") or '"token_ids"' not in line:
                continue
            count = len(json.loads(line[len("data:") :]).get("token_ids") or ())
            if count:
                now = time.perf_counter()
                trace.first = trace.first or now
                trace.arrivals.append(now)
                trace.tokens += count
    return trace


def _lone(traces: list[Trace]) -> dict[str, float]:
    """Means over requests sent one at a time: first response, and the reply's time per response."""
    ends = [(t.arrivals[-1] if t.arrivals else t.started) - t.started for t in traces]
    return {
        "tokens_per_s": sum(t.tokens for t in traces) / sum(ends),
        "ttft_ms": 1000 * statistics.mean((t.first or t.started) - t.started for t in traces),
        "ms_per_response": 1000
        * statistics.mean(end / max(len(t.arrivals), 1) for end, t in zip(ends, traces, strict=True)),
        "responses": float(statistics.mean(len(t.arrivals) for t in traces)),
    }
