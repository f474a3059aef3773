"""The chaos run's batches: one per team, submitted at the start with a deadline, every line
greedy (temperature 0) with a tiny `max_tokens`; afterwards each batch's results and errors
read back, entry by entry, and every done entry (or a sample) run again to compare.

    submit()   POST /v1/batches (native JSONL), the lines kept here by custom_id
    wait()     until every batch is in a final status (or the time is up)
    outcomes() custom_id -> every outcome the results and errors files hold for it
    rerun()    each done entry's prompt sent again, whole and greedy: its text must be the same
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import httpx

FINAL_STATUSES = frozenset({"completed", "expired", "cancelled", "failed"})
RERUN_CONCURRENCY = 16
RERUN_ATTEMPTS = 5


@dataclass(slots=True)
class ChaosBatch:
    team: str
    headers: dict[str, str]
    model: str
    lines: dict[str, dict[str, object]]  # custom_id -> the line as sent
    batch_id: str = ""
    status: str = ""
    outcomes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # custom_id -> [(kind, text or reason)]


def batch_lines(team: str, entries: int, max_tokens: int, seed: int) -> dict[str, dict[str, object]]:
    rng = random.Random(seed)
    words = ("tide", "marble", "cipher", "thunder", "violet", "granite", "quiet", "paper")
    return {
        f"{team}-{i}": {
            "custom_id": f"{team}-{i}",
            "prompt": f"entry {i} of {team}: {' '.join(rng.choice(words) for _ in range(6))}",
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        for i in range(entries)
    }


async def submit(client: httpx.AsyncClient, batch: ChaosBatch, deadline: str) -> None:
    body = "".join(json.dumps(line) + "\n" for line in batch.lines.values()).encode()
    reply = await client.post(
        "/v1/batches",
        headers=batch.headers,
        data={"model": batch.model, "deadline": deadline},
        files={"file": ("chaos.jsonl", body, "application/jsonl")},
    )
    if reply.status_code != 202:
        raise RuntimeError(f"batch of {batch.team} refused: HTTP {reply.status_code} {reply.text[:300]}")
    batch.batch_id = reply.json()["id"]


async def wait(client: httpx.AsyncClient, batches: list[ChaosBatch], timeout_s: float) -> None:
    """Poll until every batch's status is final; a batch still running at the timeout keeps
    its last status (the invariant reports it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for batch in batches:
            try:
                reply = await client.get(f"/v1/batches/{batch.batch_id}", headers=batch.headers)
                if reply.status_code == 200:
                    batch.status = reply.json()["status"]
            except httpx.TransportError:
                pass
        if all(b.status in FINAL_STATUSES for b in batches) or time.monotonic() > deadline:
            return
        await asyncio.sleep(2.0)


async def collect(client: httpx.AsyncClient, batch: ChaosBatch) -> None:
    """Every line of the results and errors files, by custom_id."""
    for kind in ("results", "errors"):
        reply = await client.get(f"/v1/batches/{batch.batch_id}/{kind}", headers=batch.headers, timeout=120)
        reply.raise_for_status()
        for raw in reply.text.splitlines():
            if not raw.strip():
                continue
            record = json.loads(raw)
            if record.get("response") is not None:
                text = str(((record["response"] or {}).get("body") or {}).get("text", ""))
                batch.outcomes.setdefault(str(record["custom_id"]), []).append(("done", text))
            else:
                error = record.get("error") or {}
                reason = f"{error.get('code', '')}: {error.get('message', '')}"
                batch.outcomes.setdefault(str(record["custom_id"]), []).append(("failed", reason))


async def rerun(
    client: httpx.AsyncClient, batch: ChaosBatch, sample: int | None, seed: int, concurrency: int = RERUN_CONCURRENCY
) -> tuple[int, list[str]]:
    """(how many done entries were run again greedy, the mismatches among them): every done
    entry, or `sample` of them picked with `seed`. A rerun the gateway refuses for now (429,
    503) is sent again after its Retry-After."""
    done = sorted(cid for cid, ends in batch.outcomes.items() if len(ends) == 1 and ends[0][0] == "done")
    picked = done if sample is None else random.Random(seed).sample(done, min(sample, len(done)))
    gate = asyncio.Semaphore(concurrency)

    async def one(custom_id: str) -> str | None:
        line = {k: v for k, v in batch.lines[custom_id].items() if k != "custom_id"}
        async with gate:
            for _ in range(RERUN_ATTEMPTS):
                reply = await client.post("/v1/generate", headers=batch.headers, json={**line, "model": batch.model})
                if reply.status_code not in (429, 503):
                    break
                await asyncio.sleep(float(reply.headers.get("retry-after", "1")))
        if reply.status_code != 200:
            return f"{custom_id}: rerun failed HTTP {reply.status_code}"
        if reply.json()["text"] != batch.outcomes[custom_id][0][1]:
            return f"{custom_id}: {batch.outcomes[custom_id][0][1]!r} != rerun {reply.json()['text']!r}"
        return None

    results = await asyncio.gather(*(one(custom_id) for custom_id in picked))
    return len(picked), [mismatch for mismatch in results if mismatch is not None]
