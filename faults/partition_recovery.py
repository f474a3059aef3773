"""What clients saw of each partition fault, from the recorded histories (one per gateway).

    recovery     from the fault's start to the end of the first call started after it that
                 completed after the fault's outage there, on the gateway that took longest.
                 The outage is the run of client errors (429s aside) from the fault's start
                 with no pause over OUTAGE_GAP_S, up to HEAL_WINDOW_S after the heal. Not
                 merely the first call to complete: a primary cut off from its replicas still
                 takes writes for `min-replicas-max-lag` (3 s), so calls complete in the
                 fault's first second, then fail for the next seven
    after heal   from the heal to the end of the first call started after it that completed
    any gateway  recovery on whichever gateway recovered first: what a client behind a load
                 balancer saw (a gateway cut from Redis says so on /readyz, and the balancer
                 sends its clients to the other)
    errors       client errors that ended between the fault's start and HEAL_WINDOW_S after
                 its heal, on either gateway
    stall        of the calls that were streaming when the fault began and completed, the
                 silence each saw across the fault's start (from its last event before to
                 its first after): a stream on a server whose link went down waits for the
                 gateway to notice and fail over, the others not at all. Reported as the
                 count over STALL_S and the max (the failover time a client saw)

and the calls that hung: a call that never ended, or ran past the client's own timeout.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping

from faults.chaos_history import CallRecord, Outcome
from faults.chaos_invariants import Check
from faults.partition_faults import FaultWindow

HEAL_WINDOW_S = 10.0
OUTAGE_GAP_S = 3.0  # client errors further apart than this are not one outage
STALL_S = 1.0  # a silence this long mid-stream is a stall (a token every ~60 ms otherwise)


def _first_ok_end(calls: list[CallRecord], since: float) -> float | None:
    ends = [c.ended for c in calls if c.outcome is Outcome.OK and c.ended is not None and c.started >= since]
    return min(ends) if ends else None


def _worst(by_gateway: Mapping[str, list[CallRecord]], since: float) -> float | None:
    ends = [_first_ok_end(calls, since) for calls in by_gateway.values()]
    if any(end is None for end in ends):
        return None  # a gateway with no completed call after it: not recovered within the run
    return max(end for end in ends if end is not None) - since


def _recovered_at(calls: list[CallRecord], window: FaultWindow) -> float | None:
    """When this gateway's clients saw `window`'s fault over: the end of the first call started
    after the fault that completed after the fault's outage there (None: none did)."""
    errors = sorted(
        c.ended for c in calls
        if c.outcome is Outcome.ERROR and c.status != 429 and c.ended is not None
        and window.at <= c.ended < window.healed + HEAL_WINDOW_S
    )  # fmt: skip
    last_error = window.at
    for ended in errors:
        if ended - last_error > OUTAGE_GAP_S:
            break  # a later error on its own: not this fault's outage
        last_error = ended
    ends = [
        c.ended
        for c in calls
        if c.outcome is Outcome.OK and c.ended is not None and c.started >= window.at and c.ended > last_error
    ]
    return min(ends) if ends else None


def _recoveries(by_gateway: Mapping[str, list[CallRecord]], window: FaultWindow) -> list[float | None]:
    """Each gateway's recovery from `window`'s start (None: not recovered within the run)."""
    return [None if (end := _recovered_at(calls, window)) is None else end - window.at for calls in by_gateway.values()]


def _stalls(calls: Iterable[CallRecord], at: float) -> list[float]:
    """The silence across `at` of each completed call streaming at that moment."""
    gaps = []
    for call in calls:
        if (
            call.outcome is not Outcome.OK
            or call.ended is None
            or not call.events
            or not call.started < at < call.ended
        ):
            continue
        moments = [call.started, *(t for t, _ in call.events), call.ended]
        gaps += [after - before for before, after in itertools.pairwise(moments) if before <= at < after]
    return gaps


def _stat(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return round(statistics.median(values), 2), round(max(values), 2)


def fault_rows(by_gateway: Mapping[str, list[CallRecord]], windows: Iterable[FaultWindow]) -> list[dict[str, object]]:
    """One row per fault kind: how many, hold, errors, recovery and after-heal (p50, max)."""
    windows = list(windows)
    errors = [c.ended for calls in by_gateway.values() for c in calls if c.outcome is Outcome.ERROR and c.ended]
    rows = []
    for kind in sorted({w.kind for w in windows}):
        mine = [w for w in windows if w.kind == kind]
        per_gateway = [_recoveries(by_gateway, w) for w in mine]
        recovered = [None if None in each else max(r for r in each if r is not None) for each in per_gateway]
        after = [_worst(by_gateway, w.healed) for w in mine]
        p50, worst = _stat([r for r in recovered if r is not None])
        _, any_max = _stat([min(ok) for each in per_gateway if (ok := [r for r in each if r is not None])])
        stalls = [gap for w in mine for calls in by_gateway.values() for gap in _stalls(calls, w.at)]
        heal_p50, heal_max = _stat([r for r in after if r is not None])
        rows.append({
            "fault": kind, "injected": len(mine),
            "held_s_p50": round(statistics.median(w.healed - w.at for w in mine), 1),
            "client_errors": sum(w.at <= e < w.healed + HEAL_WINDOW_S for w in mine for e in errors),
            "recovery_p50_s": p50, "recovery_max_s": worst, "after_heal_p50_s": heal_p50, "after_heal_max_s": heal_max,
            "not_recovered": sum(r is None for r in recovered), "any_gateway_max_s": any_max,
            "streams_at_fault": len(stalls), "stalled_over_1s": sum(g > STALL_S for g in stalls),
            "stall_max_s": round(max(stalls), 2) if stalls else None,
        })  # fmt: skip
    return rows


def no_call_hangs(calls: Iterable[CallRecord], timeout_s: float, run_end: float) -> Check:
    """Every call ended, none later than `timeout_s` after it started (+1 s of slack for the
    client's own bookkeeping)."""
    calls = list(calls)
    hung = [f"call {c.call_id} ({c.team} {c.kind}) never ended" for c in calls if c.ended is None]
    hung += [
        f"call {c.call_id} ({c.team} {c.kind}) took {c.ended - c.started:.1f} s"
        for c in calls
        if c.ended is not None and c.ended - c.started > timeout_s + 1.0
    ]
    return Check(f"no client call hangs past its {timeout_s:.0f} s timeout", len(calls), tuple(hung))


def acked_writes_kept(acked: list[str], held: set[str]) -> Check:
    """Every write the probe was told was done is on the final primary."""
    lost = tuple(f"write {w} acknowledged, then lost" for w in acked if w not in held)
    return Check("no acknowledged write lost", len(acked), lost)
