"""S1 — a ten-token answer stuck behind a long report.

Eight replies of 2,000 tokens decode on one server; then a 10-token request arrives. Its
end-to-end time is compared with the same request on the idle server, in the same run.
Target: ≤ 2× (static batching would make it wait for the 2,000-token replies: ~100×).
"""

from __future__ import annotations

import asyncio
import statistics

import httpx

from bench.common import write_result
from bench.live import load_tokenizer, prompt_of, start_streams, stop_streams, stream_generate
from switchyard.config import SwitchyardConfig

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


async def _scenario(url: str, model: str, config: SwitchyardConfig) -> dict[str, object]:
    tokenizer = load_tokenizer(config, model)
    short_prompt = prompt_of(tokenizer, 32, seed=1)
    async with httpx.AsyncClient(timeout=None) as client:
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
    return {
        "rows": [
            {"case": "idle server", "short_e2e_ms": round(statistics.median(idle) * 1000, 1)},
            {
                "case": f"behind {LONG_REPLIES}x{LONG_TOKENS}-token replies",
                "short_e2e_ms": round(statistics.median(loaded) * 1000, 1),
            },
            {"case": "ratio (target <= 2.0)", "short_e2e_ms": round(ratio, 2)},
        ],
        "meta": {
            "ratio": ratio,
            "target": 2.0,
            "long_replies_still_running_during_measurement": still_running,
            "long_tokens_written_when_cancelled": long_tokens,
            "idle_e2e_s": idle,
            "loaded_e2e_s": loaded,
        },
    }


def run(url: str, model: str, config: SwitchyardConfig) -> dict[str, object]:
    result = asyncio.run(_scenario(url, model, config))
    write_result(NAME, result["rows"], result["meta"])  # type: ignore[arg-type]
    return result
