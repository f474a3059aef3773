"""The chaos run's recorded history (Jepsen-style): every client call from its start to its
end with each event it saw, and every fault with its time, kept in memory while the run goes
and written as JSON lines afterwards; the invariants (`faults.chaos_invariants`) read only this
and what the stack reports once the run is over.

    {"type": "call", "call_id": 7, "team": "alpha", "kind": "stream-id", "request_id": "c7",
     "started": 12.31, "ended": 13.02, "outcome": "ok", "tokens": 16, "events": [[12.5, 1], ...]}
    {"type": "fault", "kind": "kill-tritonserver", "target": "chaos-small-1", "at": 40.2, ...}

Times are seconds since the run began (`History.now`).
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


class Outcome(enum.StrEnum):
    """How a client call ended, as the client saw it."""

    OK = "ok"  # a whole reply with its stop reason
    ERROR = "error"  # an HTTP error, an SSE error event, or a broken connection
    CANCELLED = "cancelled"  # the client cancelled it (DELETE) and saw it end
    DISCONNECTED = "disconnected"  # the client hung up mid-reply on purpose


@dataclass(slots=True)
class CallRecord:
    """One client call. `billed`: its tokens count against the team's usage (a repeat of a
    request_id replays a stored result and is not billed again)."""

    call_id: int
    team: str
    kind: str
    started: float
    request_id: str | None = None  # the caller-made id, when it sent one
    body: dict[str, object] = field(default_factory=dict)
    billed: bool = True
    public_id: str | None = None  # the id the gateway answered with (its log's `request_id`)
    ended: float | None = None
    outcome: Outcome | None = None
    status: int | None = None  # the HTTP status, when one came
    error: str | None = None
    retryable: bool = False  # an error the client may retry (429, 502-504, a dropped connection)
    tokens: int = 0  # completion tokens the client received
    text: str = ""
    stop_reason: str | None = None
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens) per delta


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One injected fault: when, what, on which target, and what the injector observed."""

    kind: str
    target: str
    at: float
    detail: str = ""


class History:
    """Calls and faults of one run, timed from its start."""

    def __init__(self, clock: float | None = None) -> None:
        self._t0 = time.monotonic() if clock is None else clock
        self.calls: list[CallRecord] = []
        self.faults: list[FaultRecord] = []
        self.marks: dict[str, float] = {}  # moments of the run itself (load stopped, batches final)

    def now(self) -> float:
        return time.monotonic() - self._t0

    def start_call(
        self, team: str, kind: str, body: dict[str, object], request_id: str | None = None, *, billed: bool = True
    ) -> CallRecord:
        call = CallRecord(len(self.calls), team, kind, self.now(), request_id, body, billed)
        self.calls.append(call)
        return call

    def delta(self, call: CallRecord, tokens: int, text: str) -> None:
        call.events.append((round(self.now(), 4), tokens))
        call.tokens += tokens
        call.text += text

    def end_call(
        self,
        call: CallRecord,
        outcome: Outcome,
        *,
        status: int | None = None,
        error: str | None = None,
        retryable: bool = False,
        stop_reason: str | None = None,
    ) -> None:
        call.ended, call.outcome, call.status = self.now(), outcome, status
        call.error, call.retryable, call.stop_reason = error, retryable, stop_reason

    def fault(self, kind: str, target: str, detail: str = "", *, at: float | None = None) -> FaultRecord:
        """Record a fault injected now, or `at` (a `now()` taken when it began)."""
        when = self.now() if at is None else at
        record = FaultRecord(kind, target, when, detail)  # unrounded: it sorts among the calls exactly
        self.faults.append(record)
        return record

    def write(self, path: Path) -> Path:
        """Every call and fault as one JSON line each, in time order."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [(c.started, {"type": "call", **asdict(c)}) for c in self.calls]
        lines += [(f.at, {"type": "fault", **asdict(f)}) for f in self.faults]
        with path.open("w") as out:
            for _, line in sorted(lines, key=lambda pair: pair[0]):
                out.write(json.dumps(line, default=str) + "\n")
        return path


RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})


def retryable_error(status: int | None, payload: str) -> bool:
    """Whether an error tells the client to come back: a transport failure (no status), one of
    RETRYABLE_STATUSES, or an SSE error event of a server-side kind (the reply was cut by a
    fault, not by what the client sent)."""
    if status is None:
        return True
    if status in RETRYABLE_STATUSES:
        return True
    if status == 200:  # an error event inside a stream
        return '"server_error"' in payload or '"service_unavailable"' in payload
    return False
