"""The chaos run's invariants, each checked on its own from the recorded history and what the
stack reports once the run is over, and reported as a `Check`: what was checked, and every
violation with enough detail to find it in the history.

    batch entries end once      each submitted entry has exactly one end: done, or failed /
                                expired with a reason; nothing else appears
    batch results are greedy    a sample of done entries, run again greedy, give the same text
    interactive calls end       each call completed, or ended with an error the client may
                                retry (429, 502-504, a dropped connection, a server-side error
                                event); never a 500, never a 4xx for a valid request, never open
    retries generate once       an id'd call that failed, sent again with its id, completes
    ids generate once           no caller-made request_id has two generations in the gateway's
                                "generation ended" log lines (each worker logs every one it ran);
                                one that resumed a failed one (`resumed_tokens`) continues it
    usage is what was received  per team, interactive completion tokens metered == tokens the
                                clients received (a client that hung up: what the gateway sent
                                it; the calls of one request_id: one generation, counted once)
    nothing left                no lease, KV held, orphan process, shared memory or open batch
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from faults.chaos_history import CallRecord, Outcome


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    checked: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def row(self) -> dict[str, object]:
        return {"invariant": self.name, "checked": self.checked, "violations": len(self.violations),
                "first": self.violations[0][:160] if self.violations else ""}  # fmt: skip


def batch_entries_end_once(submitted: Iterable[str], outcomes: Mapping[str, list[tuple[str, str]]]) -> Check:
    """`outcomes`: custom_id -> [(kind, text or reason)] from the results and errors files."""
    wanted = set(submitted)
    violations = []
    for custom_id in sorted(wanted):
        ends = outcomes.get(custom_id, [])
        if len(ends) != 1:
            violations.append(f"{custom_id}: {len(ends)} ends {[kind for kind, _ in ends]}")
        elif ends[0][0] != "done" and not ends[0][1].strip(": "):
            violations.append(f"{custom_id}: {ends[0][0]} without a reason")
    violations += [f"{cid}: an end for an entry never submitted" for cid in sorted(set(outcomes) - wanted)]
    return Check("batch entries end exactly once", len(wanted), tuple(violations))


def batch_results_greedy(rerun: int, mismatches: list[str]) -> Check:
    return Check("done batch entries equal a greedy rerun", rerun, tuple(mismatches))


def interactive_calls_end(calls: Iterable[CallRecord]) -> Check:
    violations, checked = [], 0
    for call in calls:
        checked += 1
        if call.outcome is None:
            violations.append(f"call {call.call_id} ({call.kind}) never ended")
        elif call.outcome is Outcome.ERROR and not call.retryable:
            violations.append(f"call {call.call_id} ({call.kind}) HTTP {call.status}: {call.error}")
    return Check("interactive calls complete or end retryable", checked, tuple(violations))


@dataclass(frozen=True, slots=True)
class Retry:
    """An id'd call that failed, sent again after the run with the same id and body."""

    request_id: str
    status: int
    detail: str


def retries_generate_once(retries: list[Retry]) -> Check:
    violations = [f"{r.request_id}: retry HTTP {r.status} {r.detail}" for r in retries if r.status != 200]
    return Check("a failed id'd call, retried with its id, completes", len(retries), tuple(violations))


@dataclass(frozen=True, slots=True)
class Generation:
    """One "generation ended" line of the gateway's log."""

    team: str
    request_id: str
    status: str
    completion_tokens: int
    resumed_tokens: int = 0  # carried from an earlier generation of the id that failed: it goes on


def generations_in_log(lines: Iterable[str]) -> list[Generation]:
    found = []
    for line in lines:
        if '"generation ended"' not in line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        tokens = int(record.get("completion_tokens", 0))
        resumed = int(record.get("resumed_tokens", 0))
        found.append(Generation(str(record["team"]), str(record["request_id"]), str(record["status"]), tokens, resumed))
    return found


def ids_generate_once(generations: Iterable[Generation], caller_ids: set[tuple[str, str]]) -> Check:
    """A generation that produced tokens counts, unless it resumed one that failed (then it goes
    on with that one's tokens, not from the start); `caller_ids`: (team, request_id) the clients made."""
    counts = Counter((g.team, g.request_id) for g in generations if g.completion_tokens > 0 and not g.resumed_tokens)
    violations = [f"{team}/{rid}: generated {n} times" for (team, rid), n in sorted(counts.items())
                  if n > 1 and (team, rid) in caller_ids]  # fmt: skip
    return Check("no request_id generated twice", len(caller_ids), tuple(violations))


def received_by_team(calls: Iterable[CallRecord], sent: Mapping[str, int]) -> dict[str, int]:
    """Completion tokens each team's calls received. Calls that share a request_id share one
    generation, billed once: they count once, as the most any of them received (a repeat that
    attached may be the one that got it, when the first call's connection broke). A client
    that hung up on purpose counts what the gateway sent it (`sent`: its log's completion
    tokens by public id)."""
    totals: Counter[str] = Counter()
    by_id: dict[tuple[str, str], int] = {}
    for call in calls:
        tokens = call.tokens
        if call.outcome is Outcome.DISCONNECTED and call.public_id is not None:
            tokens = sent.get(call.public_id, call.tokens)
        if call.request_id is not None:
            key = (call.team, call.request_id)
            by_id[key] = max(by_id.get(key, 0), tokens)
        elif call.billed:
            totals[call.team] += tokens
    for (team, _), tokens in by_id.items():
        totals[team] += tokens
    return dict(totals)


def usage_matches(received: Mapping[str, int], metered: Mapping[str, int]) -> Check:
    teams = sorted(set(received) | set(metered))
    violations = [f"{t}: metered {metered.get(t, 0)}, received {received.get(t, 0)}" for t in teams
                  if metered.get(t, 0) != received.get(t, 0)]  # fmt: skip
    return Check("interactive usage per team equals tokens received", len(teams), tuple(violations))


def nothing_left(name: str, checked: int, leftovers: list[str]) -> Check:
    return Check(name, checked, tuple(leftovers))
