"""What the chaos run and the partition run ask the stack alike once their load has stopped,
each turned into its invariant's `Check` (chaos_invariants.py holds the checks themselves).

    batches      every result collected; each entry ended once; no batch left unfinished
    generations  the gateways' logs against what clients received and what was metered:
                 usage exact, no request_id generated twice
    retries      every id'd call that failed, sent again whole: the same id never runs twice
    reruns       a sample of done entries sent again: greedy results are reproduced

The two runs differ in their stacks (one host, or hosts over network namespaces) and in what
they wait for between these; the questions are the same, so they live here once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from faults import chaos_batches, chaos_invariants
from faults.chaos_batches import ChaosBatch
from faults.chaos_history import CallRecord, Outcome
from faults.chaos_invariants import Check, Retry


async def batch_checks(client: httpx.AsyncClient, batches: list[ChaosBatch]) -> list[Check]:
    """Each batch's results collected (its status final, or given up on), then: every entry
    ended exactly once, and no batch is left in a non-final state."""
    for batch in batches:
        await chaos_batches.collect(client, batch)
    outcomes = {cid: ends for b in batches for cid, ends in b.outcomes.items()}
    unfinished = [
        f"{b.batch_id} ({b.team}): {b.status}" for b in batches if b.status not in chaos_batches.FINAL_STATUSES
    ]
    return [
        chaos_invariants.batch_entries_end_once([c for b in batches for c in b.lines], outcomes),
        chaos_invariants.nothing_left("no batch left in a non-final state", len(batches), unfinished),
    ]


async def metered_usage(admin: httpx.AsyncClient) -> dict[str, int]:
    """Interactive completion tokens per team, from GET /v1/usage (`admin` holds the admin key:
    it sees every team)."""
    start = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    reply = (await admin.get("/v1/usage", params={"start": start})).raise_for_status().json()
    totals: dict[str, int] = {}
    for row in reply["data"]:
        if row["class"] == "interactive":
            totals[row["team"]] = totals.get(row["team"], 0) + int(row["completion_tokens"])
    return totals


def generation_checks(log_lines: list[str], calls: list[CallRecord], metered: dict[str, int]) -> list[Check]:
    """From the gateways' generation log lines: what clients received equals what was metered,
    and no caller's request_id generated twice."""
    generations = chaos_invariants.generations_in_log(log_lines)
    sent = {g.request_id: g.completion_tokens for g in generations}
    received = chaos_invariants.received_by_team(calls, sent)
    caller_ids = {(c.team, c.request_id) for c in calls if c.request_id is not None}
    return [
        chaos_invariants.usage_matches(received, metered),
        chaos_invariants.ids_generate_once(generations, caller_ids),
    ]


async def retry_check(client: httpx.AsyncClient, headers: dict[str, dict[str, str]], calls: list[CallRecord]) -> Check:
    """Every id'd call that ended in an error sent again whole, with its id and body, as its
    team (`headers` by team): none may generate a second time."""
    retries = []
    for call in [c for c in calls if c.request_id is not None and c.outcome is Outcome.ERROR]:
        reply = await client.post("/v1/generate", headers=headers[call.team], json=call.body)
        retries.append(Retry(call.request_id or "", reply.status_code, reply.text[:200]))
    return chaos_invariants.retries_generate_once(retries)


async def rerun_check(client: httpx.AsyncClient, batches: list[ChaosBatch], sample: int | None, seed: int) -> Check:
    """`sample` done entries of each batch (None: all) sent again: each greedy result the same."""
    rerun, mismatches = 0, list[str]()
    for i, batch in enumerate(batches):
        count, found = await chaos_batches.rerun(client, batch, sample, seed + i)
        rerun, mismatches = rerun + count, mismatches + found
    return chaos_invariants.batch_results_greedy(rerun, mismatches)
