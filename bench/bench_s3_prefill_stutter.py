"""S3 — every long document makes everyone's replies stutter.

Sixteen streams decode; then a 30,000-token document arrives. We compare the p99 gap between
deltas of the running streams while the document is read against the gap before it arrived,
on a server with chunked prefill (cost-budgeted steps) and on one with it switched off.
Target with chunked prefill: ≤ 3× (unchunked prefill stalls every stream for the whole read).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from bench.live import load_tokenizer, percentile, prompt_of, start_streams, stop_streams, stream_generate
from config.settings import SwitchyardConfig
from report.result_files import write_result

NAME = "s3_prefill_stutter"
STREAMS = 16
DOCUMENT_TOKENS = 30_000
BASELINE_WINDOW_S = 3.0
# Admission reserves prompt + max_tokens: 16 streams of 200 + 2,000 and the document fit the
# server's 80,000 tokens. The streams outlast the document's read at the step rates seen here.
STREAM_TOKENS = 2_000


async def _one_server(url: str, model: str, config: SwitchyardConfig, headers: dict[str, str]) -> dict[str, float]:
    tokenizer = load_tokenizer(config, model)
    document = prompt_of(tokenizer, DOCUMENT_TOKENS, seed=7)
    async with httpx.AsyncClient(timeout=None, headers=headers) as client:
        traces, streams = start_streams(
            client,
            url,
            [
                {
                    "model": model,
                    "prompt": prompt_of(tokenizer, 200, seed=300 + i),
                    "max_tokens": STREAM_TOKENS,
                    "ignore_eos": True,
                }
                for i in range(STREAMS)
            ],
        )
        await asyncio.sleep(1.5)  # every stream is decoding
        baseline_from = time.perf_counter()
        await asyncio.sleep(BASELINE_WINDOW_S)
        doc = await stream_generate(
            client, url, {"model": model, "prompt": document, "max_tokens": 1, "ignore_eos": True}
        )
        await asyncio.sleep(0.5)
        await stop_streams(streams)
    if doc.error or doc.ttft is None:
        raise RuntimeError(f"document request failed: {doc.error}")
    doc_from, doc_until = doc.started, doc.started + doc.ttft
    before = [g for t in traces for g in t.gaps(baseline_from, doc_from)]
    during = [g for t in traces for g in t.gaps(doc_from, doc_until)]
    return {
        "p99_gap_before_ms": percentile(before, 99) * 1000,
        "p99_gap_during_ms": percentile(during, 99) * 1000,
        "max_gap_during_ms": max(during, default=0.0) * 1000,
        "document_ttft_s": doc.ttft,
        "gaps_during": float(len(during)),
    }


def run(
    chunked: tuple[str, str], unchunked: tuple[str, str], config: SwitchyardConfig, headers: dict[str, str]
) -> dict[str, object]:
    """`chunked` and `unchunked` are (gateway url, model alias) of two bench pools."""
    results = {
        label: asyncio.run(_one_server(url, model, config, headers))
        for label, (url, model) in (("chunked", chunked), ("unchunked", unchunked))
    }
    rows = []
    for label, r in results.items():
        ratio = r["p99_gap_during_ms"] / r["p99_gap_before_ms"] if r["p99_gap_before_ms"] else float("inf")
        rows.append(
            {
                "prefill": label,
                "p99_gap_before_ms": round(r["p99_gap_before_ms"], 1),
                "p99_gap_during_ms": round(r["p99_gap_during_ms"], 1),
                "max_gap_during_ms": round(r["max_gap_during_ms"], 1),
                "ratio": round(ratio, 2),
                "doc_ttft_s": round(r["document_ttft_s"], 2),
            }
        )
    meta = {
        "target_ratio_chunked": 3.0,
        "streams": STREAMS,
        "document_tokens": DOCUMENT_TOKENS,
        "raw": results,
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
