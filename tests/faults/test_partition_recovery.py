"""What clients saw of each partition fault (faults/partition_recovery.py), on hand-made histories."""

from __future__ import annotations

from faults.chaos_history import CallRecord, Outcome
from faults.partition_faults import FaultWindow
from faults.partition_recovery import fault_rows, no_call_hangs


def _call(
    call_id: int, started: float, ended: float | None, outcome: Outcome, events: tuple[float, ...] = ()
) -> CallRecord:
    return CallRecord(
        call_id, "alpha", "stream", started, ended=ended, outcome=outcome, events=[(t, 1) for t in events]
    )


def test_recovery_is_the_slower_gateways_and_the_stall_is_the_silence_across_the_fault() -> None:
    cut = FaultWindow("server-link", "srv1", at=10.0, healed=18.0)
    by_gateway = {
        "gw1": [
            # streaming on the cut server: silent from 9.9 until the failover's first token at 13.1
            _call(0, 9.0, 14.0, Outcome.OK, (9.5, 9.9, 13.1, 13.5)),
            _call(1, 10.2, 11.0, Outcome.ERROR),
            _call(2, 10.5, 12.5, Outcome.OK, (11.0,)),  # the first call after the fault to complete here
        ],
        "gw2": [
            _call(3, 9.5, 11.0, Outcome.OK, (9.8, 10.05, 10.3)),  # another server: no stall
            _call(4, 10.1, 10.9, Outcome.OK, (10.4,)),
            _call(5, 9.0, 10.5, Outcome.ERROR, (9.5,)),  # failed: no stall counted
        ],
    }
    (row,) = fault_rows(by_gateway, [cut])
    assert row["fault"] == "server-link" and row["injected"] == 1 and row["held_s_p50"] == 8.0
    assert (row["recovery_p50_s"], row["recovery_max_s"]) == (2.5, 2.5)  # gw1's, the slower
    assert row["any_gateway_max_s"] == 0.9  # gw2's: behind a load balancer
    assert row["client_errors"] == 2  # both ended within the window, on either gateway
    assert (row["streams_at_fault"], row["stalled_over_1s"], row["stall_max_s"]) == (2, 1, 3.2)
    assert row["not_recovered"] == 0


def test_a_gateway_with_no_completed_call_after_the_fault_has_not_recovered() -> None:
    window = FaultWindow("gateway-redis", "gw1", at=5.0, healed=13.0)
    by_gateway = {"gw1": [_call(0, 6.0, 7.0, Outcome.ERROR)], "gw2": [_call(1, 6.0, 6.5, Outcome.OK)]}
    (row,) = fault_rows(by_gateway, [window])
    assert row["not_recovered"] == 1 and row["recovery_max_s"] is None
    assert row["any_gateway_max_s"] == 1.5
    assert (row["streams_at_fault"], row["stall_max_s"]) == (0, None)


def test_recovery_waits_for_the_faults_last_error_not_its_first_completed_call() -> None:
    """A primary cut off from its replicas takes writes for a few seconds more: calls complete
    at once, then fail until the promotion. Recovery is the first completion after the last
    error (a 429 is the team's limit, not the fault)."""
    brain = FaultWindow("split-brain", "redis0", at=10.0, healed=19.0)
    calls = [
        _call(0, 10.1, 10.4, Outcome.OK),  # the old primary still writes
        _call(1, 12.0, 12.01, Outcome.ERROR),
        _call(2, 17.5, 17.51, Outcome.ERROR),  # the last error: 7.51 s in
        _call(3, 17.0, 18.0, Outcome.OK),  # started during the outage, completed after it: recovered
        _call(4, 18.5, 18.6, Outcome.OK),
    ]
    limited = CallRecord(5, "alpha", "whole", 18.2, ended=18.3, outcome=Outcome.ERROR, status=429)
    later = _call(7, 20.0, 20.1, Outcome.ERROR)  # 7 s after the outage's last: not part of it
    gw2 = [*calls[:2], _call(6, 12.5, 13.0, Outcome.OK), limited, later]
    (row,) = fault_rows({"gw1": calls, "gw2": gw2}, [brain])
    assert (row["recovery_p50_s"], row["recovery_max_s"]) == (8.0, 8.0)  # gw1's: 18.0 - 10.0
    assert row["any_gateway_max_s"] == 3.0  # gw2's last error at 12.01, a completion at 13.0


def test_calls_that_never_ended_or_ran_past_their_timeout_hang() -> None:
    calls = [_call(0, 0.0, None, Outcome.OK), _call(1, 0.0, 130.0, Outcome.OK), _call(2, 0.0, 100.0, Outcome.OK)]
    check = no_call_hangs(calls, 120.0, 200.0)
    assert check.checked == 3 and len(check.violations) == 2
