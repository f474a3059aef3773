"""The chaos run's invariants on hand-made histories: each one passes what it must pass and
reports, one by one, every violation it must catch (a check that cannot fail proves nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from faults.chaos_history import History, Outcome, retryable_error
from faults.chaos_invariants import (
    Generation,
    Retry,
    batch_entries_end_once,
    generations_in_log,
    ids_generate_once,
    interactive_calls_end,
    received_by_team,
    retries_generate_once,
    usage_matches,
)


def test_every_entry_ends_once_with_a_reason_when_it_failed() -> None:
    ends = {"a": [("done", "text")], "b": [("failed", "expired: past its deadline")]}
    assert batch_entries_end_once(["a", "b"], ends).ok
    bad = batch_entries_end_once(
        ["a", "b", "c", "d"],
        {"a": [("done", "x"), ("done", "x")], "b": [("failed", ": ")], "d": [("done", "")], "z": [("done", "")]},
    )
    assert bad.checked == 4
    assert bad.violations == (
        "a: 2 ends ['done', 'done']",
        "b: failed without a reason",
        "c: 0 ends []",
        "z: an end for an entry never submitted",
    )


def test_a_call_ends_completed_or_with_an_error_the_client_may_retry() -> None:
    history = History(clock=0.0)
    ok = history.start_call("t", "stream", {})
    history.end_call(ok, Outcome.OK, status=200, stop_reason="length")
    dropped = history.start_call("t", "stream", {})
    history.end_call(dropped, Outcome.ERROR, error="transport", retryable=retryable_error(None, ""))
    busy = history.start_call("t", "whole", {})
    history.end_call(busy, Outcome.ERROR, status=503, retryable=retryable_error(503, "{}"))
    assert interactive_calls_end(history.calls).ok
    broken = history.start_call("t", "whole", {})
    history.end_call(broken, Outcome.ERROR, status=500, error="boom", retryable=retryable_error(500, "boom"))
    history.start_call("t", "stream", {})  # never ended
    check = interactive_calls_end(history.calls)
    assert check.checked == 5
    assert check.violations == ("call 3 (whole) HTTP 500: boom", "call 4 (stream) never ended")


def test_an_error_event_is_retryable_only_when_the_server_side_failed() -> None:
    assert retryable_error(200, json.dumps({"error": {"type": "server_error"}}))
    assert not retryable_error(200, json.dumps({"error": {"type": "invalid_request_error"}}))
    assert not retryable_error(400, "{}")


def test_a_request_id_generated_twice_is_reported(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"message": "generation ended", "team": "t", "request_id": rid, "completion_tokens": n, "status": "length"}
        )
        for rid, n in (("r1", 4), ("r1", 4), ("r2", 4), ("r2", 0), ("auto", 3), ("auto", 3))
    ] + ['{"message": "something else"}', "not json at all"]
    generations = generations_in_log(lines)
    assert generations[0] == Generation("t", "r1", "length", 4)
    check = ids_generate_once(generations, {("t", "r1"), ("t", "r2")})
    assert check.violations == ("t/r1: generated 2 times",)  # r2's second produced nothing; auto is no caller id


def test_a_generation_that_resumed_a_failed_one_is_not_a_second() -> None:
    line = '{{"message": "generation ended", "team": "t", "request_id": "r3", "completion_tokens": {}, ' \
        '"status": "{}", "resumed_tokens": {}}}'  # fmt: skip
    generations = generations_in_log([line.format(2, "error", 0), line.format(9, "length", 2)])
    assert generations[1] == Generation("t", "r3", "length", 9, 2)
    assert ids_generate_once(generations, {("t", "r3")}).ok
    twice = generations_in_log([line.format(2, "error", 0), line.format(9, "length", 0)])
    assert not ids_generate_once(twice, {("t", "r3")}).ok  # from the start again: two generations


def test_usage_counts_what_clients_received_and_what_a_hung_up_client_was_sent() -> None:
    history = History(clock=0.0)
    whole = history.start_call("a", "whole", {})
    history.delta(whole, 8, "x")
    first = history.start_call("a", "stream-id", {}, "r1")  # its connection broke: nothing came
    history.end_call(first, Outcome.ERROR, error="transport", retryable=True)
    repeat = history.start_call("a", "repeat", {}, "r1", billed=False)  # got the one generation
    history.delta(repeat, 6, "x")
    again = history.start_call("a", "repeat", {}, "r1", billed=False)  # the stored result, again
    history.delta(again, 6, "x")
    gone = history.start_call("b", "disconnect", {})
    gone.public_id = "p1"
    history.delta(gone, 2, "yy")
    history.end_call(gone, Outcome.DISCONNECTED)
    received = received_by_team(history.calls, {"p1": 5})
    assert received == {"a": 14, "b": 5}
    assert usage_matches(received, {"a": 14, "b": 5}).ok
    assert usage_matches(received, {"a": 13, "b": 5, "c": 1}).violations == (
        "a: metered 13, received 14",
        "c: metered 1, received 0",
    )


def test_a_retry_that_fails_again_is_a_violation() -> None:
    check = retries_generate_once([Retry("r1", 200, ""), Retry("r2", 502, "gone")])
    assert check.checked == 2 and check.violations == ("r2: retry HTTP 502 gone",)


def test_the_history_is_written_in_time_order(tmp_path: Path) -> None:
    history = History(clock=0.0)
    call = history.start_call("a", "stream", {"prompt": "p"}, "r1")
    history.fault("kill-dispatcher", "pid 1")
    history.end_call(call, Outcome.OK, status=200)
    lines = [json.loads(line) for line in history.write(tmp_path / "h.jsonl").read_text().splitlines()]
    assert [line["type"] for line in lines] == ["call", "fault"]
    assert lines[0]["request_id"] == "r1" and lines[0]["outcome"] == "ok"
