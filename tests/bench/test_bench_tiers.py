"""The tiers bench's arithmetic (bench/tier_rows.py, tier_phase.py, admission_waits.py, tier_mix.py):
fair shares, what a refusal parses to, goodput's test, and the admission-wait histogram's diff."""

from __future__ import annotations

import pytest

from bench.admission_waits import admission_waits
from bench.live import StreamTrace
from bench.tier_mix import LONG, SHORT, LatencyTarget, TieredRequest, build_schedule
from bench.tier_phase import RequestOutcome, refusal_of
from bench.tier_rows import met, team_shares, weighted_fair_shares


def test_fair_shares_by_weight_when_every_team_asks_more_than_its_part() -> None:
    shares = weighted_fair_shares({"chat": 500.0, "search": 500.0}, {"chat": 3.0, "search": 2.0}, 100.0)
    assert shares == pytest.approx({"chat": 0.6, "search": 0.4})


def test_a_team_asking_less_than_its_part_gets_what_it_asks_the_rest_goes_by_weight() -> None:
    shares = weighted_fair_shares(
        {"chat": 100.0, "search": 300.0, "analytics": 300.0}, {"chat": 3.0, "search": 2.0, "analytics": 1.0}, 400.0
    )
    # chat's part by weight would be 200: it asked 100; 300 left by 2 : 1.
    assert shares == pytest.approx({"chat": 0.25, "search": 0.5, "analytics": 0.25})


def test_fair_shares_when_everything_asked_was_served() -> None:
    shares = weighted_fair_shares({"chat": 30.0, "search": 10.0}, {"chat": 1.0, "search": 1.0}, 40.0)
    assert shares == pytest.approx({"chat": 0.75, "search": 0.25})


def _request(team: str = "chat", tier: str = "default", max_tokens: int = 4) -> TieredRequest:
    return TieredRequest(0, 0.0, team, tier, "p", max_tokens)  # type: ignore[arg-type]


def _served(started: float, times: list[float], tokens: list[int]) -> StreamTrace:
    trace = StreamTrace(started=started, event_times=times, event_tokens=tokens, stop_reason="length")
    trace.finished = times[-1]
    return trace


def test_a_refusal_parses_its_status_code_and_retry_after() -> None:
    body = '{"error":{"message":"no idle capacity","type":"rate_limit_error","code":"flex_capacity_unavailable"}}'
    refusal = refusal_of(StreamTrace(started=0.0, error=f"HTTP 429: {body}", retry_after_s=3.0))
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.retry_after_s) == (429, "flex_capacity_unavailable", 3.0)
    assert refusal.message == "no idle capacity"
    assert refusal_of(StreamTrace(started=0.0, error='{"code": "engine_error"}')) is None  # an SSE error event


def test_goodput_counts_completed_requests_within_both_targets() -> None:
    target = LatencyTarget(ttft_ms=2_000, tpot_ms=500)
    fast = RequestOutcome(_request(), "interactive", [_served(10.0, [11.0, 11.3, 11.6], [1, 2, 1])])
    assert fast.ttft_s == pytest.approx(1.0) and fast.tpot_s == pytest.approx(0.2)
    assert met(fast, target)
    late = RequestOutcome(_request(), "interactive", [_served(10.0, [12.5, 12.6], [1, 3])])
    assert not met(late, target)
    slow = RequestOutcome(_request(), "interactive", [_served(10.0, [10.1, 12.0], [1, 1])])
    assert not met(slow, target)
    refused = RequestOutcome(_request(), "interactive", [StreamTrace(started=10.0, error="HTTP 503: {}")])
    assert not met(refused, target) and refused.final_refusal is not None


def test_a_retried_requests_ttft_counts_from_its_first_attempt() -> None:
    first = StreamTrace(started=5.0, error="HTTP 503: {}", retry_after_s=1.0)
    outcome = RequestOutcome(_request(tier="batch"), "bulk", [first, _served(6.0, [7.0, 7.5], [1, 3])])
    assert outcome.ttft_s == pytest.approx(2.0)
    assert outcome.completed and len(outcome.refusals) == 1


def test_team_shares_are_of_the_reply_tokens_served() -> None:
    outcomes = [
        RequestOutcome(_request("chat"), "interactive", [_served(0.0, [1.0, 2.0], [1, 3])]),
        RequestOutcome(_request("search"), "interactive", [StreamTrace(started=0.0, error="HTTP 429: {}")]),
    ]
    shares = team_shares(outcomes, {"chat": 3.0, "search": 2.0})
    # Both asked 4 tokens, 4 were served: fair is 0.6 / 0.4, chat got them all.
    assert shares == {"chat": {"share": 1.0, "fair": 0.6}, "search": {"share": 0.0, "fair": 0.4}}


def test_admission_waits_between_two_scrapes() -> None:
    before = {("priority", "0.01"): 2.0, ("priority", "0.1"): 2.0, ("priority", "+Inf"): 2.0, ("priority", "sum"): 0.01}
    after = {("priority", "0.01"): 3.0, ("priority", "0.1"): 5.0, ("priority", "+Inf"): 6.0, ("priority", "sum"): 1.01}
    wait = admission_waits(before, after)["priority"]
    assert (wait.count, wait.mean_ms, wait.p50_le_ms, wait.p99_le_ms) == (4, 250.0, 100.0, None)


def test_the_schedule_is_seeded_and_sends_every_interactive_tier_as_default_in_the_baseline() -> None:
    def prompt_for(shape: object, seed: int) -> str:
        return f"prompt {seed}"

    first = build_schedule(10.0, 5.0, 3, prompt_for)
    assert first == build_schedule(10.0, 5.0, 3, prompt_for)
    assert [r.at_s for r in first] == sorted(r.at_s for r in first)
    by_tier = {r.tier: r for r in first}
    assert set(by_tier) == {"priority", "default", "flex", "batch"}
    assert by_tier["priority"].max_tokens == SHORT.max_tokens and by_tier["flex"].max_tokens == LONG.max_tokens
    assert [by_tier[t].sent_class(baseline=False) for t in ("priority", "default", "flex", "batch")] == [
        "priority", "interactive", "flex", "bulk"
    ]  # fmt: skip
    assert {by_tier[t].sent_class(baseline=True) for t in ("priority", "default", "flex")} == {"interactive"}
    assert by_tier["batch"].sent_class(baseline=True) == "bulk"
