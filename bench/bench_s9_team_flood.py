"""S9 — one team floods the fleet.

Team B runs within its share (a few closed-loop clients); first alone, then while team A
floods (many closed-loop clients with long replies, backing off only as Retry-After says).
Targets: B's admissions and time to first token unchanged within 1.2×; A held to its share
(429 with Retry-After, or borrowed capacity only while B leaves it idle).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from bench.live import StreamTrace, load_tokenizer, percentile, prompt_of, stream_generate
from config.settings import SwitchyardConfig
from report.result_files import write_result

NAME = "s9_team_flood"
B_CLIENTS = 4
B_TOKENS = 64
A_CLIENTS = 40
A_TOKENS = 2_000
PROMPT_TOKENS = 200
WINDOW_S = 10.0


@dataclass(slots=True)
class TeamTally:
    """One team's requests in a phase; `traces` include those cut off at the window's end."""

    traces: list[StreamTrace] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)
    retry_after_missing: int = 0

    @property
    def admitted(self) -> int:
        return sum(1 for t in self.traces if t.ttft is not None)

    @property
    def ttfts(self) -> list[float]:
        return [t.ttft for t in self.traces if t.ttft is not None]

    @property
    def sent(self) -> int:
        return self.admitted + sum(self.refused.values())


async def _client_loop(client: httpx.AsyncClient, url: str, body: dict[str, object], tally: TeamTally) -> None:
    while True:
        trace = StreamTrace(started=0.0)
        tally.traces.append(trace)
        await stream_generate(client, url, body, trace)
        if trace.error is None:
            continue
        tally.traces.remove(trace)
        status = int(trace.error.split()[1].rstrip(":")) if trace.error and trace.error.startswith("HTTP") else 0
        tally.refused[status] = tally.refused.get(status, 0) + 1
        retry_after = trace.retry_after_s
        if status in (429, 503) and retry_after is None:
            tally.retry_after_missing += 1
        await asyncio.sleep(min(retry_after or 0.2, 1.0))


async def _phase(
    url: str, model: str, config: SwitchyardConfig, teams: dict[str, dict[str, str]], flood: bool
) -> dict[str, TeamTally]:
    """Closed-loop clients for WINDOW_S; what was still running then is cancelled."""
    tokenizer = load_tokenizer(config, model)
    tallies = {"team-a": TeamTally(), "team-b": TeamTally()}
    async with (
        httpx.AsyncClient(timeout=None, headers=teams["team-a"]) as a,
        httpx.AsyncClient(timeout=None, headers=teams["team-b"]) as b,
    ):
        tasks = []
        if flood:
            body_a = {"model": model, "prompt": prompt_of(tokenizer, PROMPT_TOKENS, seed=1), "max_tokens": A_TOKENS,
                      "ignore_eos": True}  # fmt: skip
            tasks += [asyncio.create_task(_client_loop(a, url, body_a, tallies["team-a"])) for _ in range(A_CLIENTS)]
            await asyncio.sleep(2.0)  # A holds the fleet before B arrives
        for i in range(B_CLIENTS):
            body_b = {"model": model, "prompt": prompt_of(tokenizer, PROMPT_TOKENS, seed=100 + i),
                      "max_tokens": B_TOKENS, "ignore_eos": True}  # fmt: skip
            tasks.append(asyncio.create_task(_client_loop(b, url, body_b, tallies["team-b"])))
        await asyncio.sleep(WINDOW_S)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tallies


def run(url: str, model: str, config: SwitchyardConfig, teams: dict[str, dict[str, str]]) -> dict[str, object]:
    """`teams`: request headers of `team-a` and `team-b` (equal weights)."""
    alone = asyncio.run(_phase(url, model, config, teams, flood=False))["team-b"]
    both = asyncio.run(_phase(url, model, config, teams, flood=True))
    b, a = both["team-b"], both["team-a"]
    ttft_ratio = percentile(b.ttfts, 50) / percentile(alone.ttfts, 50) if alone.ttfts else float("inf")
    rows = [
        {"case": "B alone", "b_sent": alone.sent, "b_admitted": alone.admitted,
         "b_ttft_p50_ms": round(percentile(alone.ttfts, 50) * 1000, 1),
         "b_ttft_p99_ms": round(percentile(alone.ttfts, 99) * 1000, 1), "a_admitted": 0, "a_refused": 0},
        {"case": "B while A floods", "b_sent": b.sent, "b_admitted": b.admitted,
         "b_ttft_p50_ms": round(percentile(b.ttfts, 50) * 1000, 1),
         "b_ttft_p99_ms": round(percentile(b.ttfts, 99) * 1000, 1), "a_admitted": a.admitted,
         "a_refused": sum(a.refused.values())},
    ]  # fmt: skip
    meta = {
        "b_admission_rate_alone": alone.admitted / max(1, alone.sent),
        "b_admission_rate_flood": b.admitted / max(1, b.sent),
        "b_ttft_p50_ratio": ttft_ratio,
        "target_ratio": 1.2,
        "a_refusals_by_status": a.refused,
        "a_refusals_without_retry_after": a.retry_after_missing,
        "b_refusals_by_status": b.refused,
        "window_s": WINDOW_S,
        "clients": {"team-a": A_CLIENTS, "team-b": B_CLIENTS},
    }
    write_result(NAME, rows, meta)
    return {"rows": rows, "meta": meta}
