"""S2 — a 30,000-token document meets a full server.

Bulk replies with 9,000-token prompts fill the KV cache while a few interactive streams
decode; then an interactive 30,000-token document arrives. Targets: nothing fails; KV in use
never exceeds capacity (sampled from the server's `nv_trt_llm_kv_cache_block_metrics`); the
interactive streams keep going; the document is served once room exists (here: by preempting
bulk, which is recomputed and still completes).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from bench.live import (
    MetricsSampler,
    StreamTrace,
    load_tokenizer,
    percentile,
    prompt_of,
    read_kv_metrics,
    start_streams,
    stop_streams,
    stream_generate,
)
from config.settings import SwitchyardConfig
from report.result_files import write_result

NAME = "s2_document_full_server"
# Two teams of equal weight: `batch` fills the server with bulk (beyond its half it borrows),
# then `chat` starts interactive streams and sends the document. Admission leases prompt +
# max_tokens, so the numbers are chosen to pass it; the KV itself fills past what fits.
BULK_REPLIES = 7
BULK_PROMPT_TOKENS = 9_000
BULK_MAX_TOKENS = 200
INTERACTIVE_STREAMS = 4
INTERACTIVE_TOKENS = 2_000
DOCUMENT_TOKENS = 30_000
FULL_FRACTION = 0.75


async def _wait_kv_full(metrics_url: str, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    used = 0.0
    while time.monotonic() < deadline:
        m = read_kv_metrics(metrics_url)
        used = m["nv_trt_llm_kv_cache_block_metrics.used"] / m["nv_trt_llm_kv_cache_block_metrics.max"]
        if used >= FULL_FRACTION:
            return used
        await asyncio.sleep(0.1)
    return used


async def _scenario(
    url: str, model: str, metrics_url: str, config: SwitchyardConfig, teams: dict[str, dict[str, str]]
) -> dict[str, object]:
    tokenizer = load_tokenizer(config, model)
    async with (
        httpx.AsyncClient(timeout=None, headers=teams["chat"]) as client,
        httpx.AsyncClient(timeout=None, headers=teams["batch"]) as batch,
    ):
        bulk = [
            asyncio.create_task(
                stream_generate(
                    batch,
                    url,
                    {
                        "model": model,
                        "prompt": prompt_of(tokenizer, BULK_PROMPT_TOKENS, seed=600 + i),
                        "max_tokens": BULK_MAX_TOKENS,
                        "ignore_eos": True,
                        "class": "bulk",
                    },
                )
            )
            for i in range(BULK_REPLIES)
        ]
        # Bulk fills the KV first; then people arrive: interactive streams, then the document.
        kv_full_at_arrival = await _wait_kv_full(metrics_url, timeout_s=120)
        inter, interactive = start_streams(
            client,
            url,
            [
                {
                    "model": model,
                    "prompt": prompt_of(tokenizer, 100, seed=500 + i),
                    "max_tokens": INTERACTIVE_TOKENS,
                    "ignore_eos": True,
                }
                for i in range(INTERACTIVE_STREAMS)
            ],
        )
        await asyncio.sleep(1.5)  # the streams are decoding
        doc = await stream_generate(
            client,
            url,
            {
                "model": model,
                "prompt": prompt_of(tokenizer, DOCUMENT_TOKENS, seed=9),
                "max_tokens": 16,
                "ignore_eos": True,
            },
        )
        bulk_traces = await asyncio.gather(*bulk)
        await stop_streams(interactive)
    doc_from = doc.started
    doc_until = doc.started + (doc.ttft or 0.0)
    return {
        "kv_full_at_arrival": kv_full_at_arrival,
        "doc": doc,
        "bulk": bulk_traces,
        "interactive_gaps_before": [g for t in inter for g in t.gaps(0.0, doc_from)],
        "interactive_gaps_during": [g for t in inter for g in t.gaps(doc_from, doc_until)],
        "interactive_tokens": [t.completion_tokens for t in inter],
    }


def run(
    url: str, model: str, metrics_url: str, config: SwitchyardConfig, teams: dict[str, dict[str, str]]
) -> dict[str, object]:
    """`teams`: request headers of teams `chat` and `batch`."""
    with MetricsSampler(metrics_url) as sampler:
        r = asyncio.run(_scenario(url, model, metrics_url, config, teams))
    doc: StreamTrace = r["doc"]  # type: ignore[assignment]
    bulk: list[StreamTrace] = r["bulk"]  # type: ignore[assignment]
    used = [s.get("nv_trt_llm_kv_cache_block_metrics.used", 0.0) for s in sampler.samples]
    capacity = max((s.get("nv_trt_llm_kv_cache_block_metrics.max", 0.0) for s in sampler.samples), default=0.0)
    failures = [t.error for t in [doc, *bulk] if t.error] + [
        f"bulk ended {t.stop_reason} after {t.completion_tokens}"
        for t in bulk
        if not t.error and t.completion_tokens != BULK_MAX_TOKENS
    ]
    before: list[float] = r["interactive_gaps_before"]  # type: ignore[assignment]
    during: list[float] = r["interactive_gaps_during"]  # type: ignore[assignment]
    rows: list[dict[str, object]] = [
        {"measure": "requests failed", "value": len(failures)},
        {"measure": "KV used at document arrival", "value": f"{r['kv_full_at_arrival']:.0%}"},
        {"measure": "max KV blocks used / capacity", "value": f"{max(used, default=0):.0f} / {capacity:.0f}"},
        {"measure": "document time to first token (s)", "value": round(doc.ttft or -1.0, 2)},
        {"measure": "document completion tokens", "value": doc.completion_tokens},
        {
            "measure": "bulk replies completed",
            "value": f"{sum(t.completion_tokens == BULK_MAX_TOKENS for t in bulk)} / {len(bulk)}",
        },
        {"measure": "interactive p99 gap before (ms)", "value": round(percentile(before, 99) * 1000, 1)},
        {
            "measure": "interactive p99 gap during document (ms)",
            "value": round(percentile(during, 99) * 1000, 1),
        },
        {"measure": "interactive deltas during document", "value": len(during)},
    ]
    meta = {
        "failures": failures,
        "max_used_blocks": max(used, default=0.0),
        "capacity_blocks": capacity,
        "never_exceeded": all(u <= capacity for u in used),
        "samples": len(used),
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
