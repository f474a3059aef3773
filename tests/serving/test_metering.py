"""`request_usage`: an ended request in flight, read into the usage formula's plain values
(the formula itself: tests/quota/test_usage_formula.py)."""

from __future__ import annotations

from contracts.generation import GenerationDelta, GenerationRequest, Usage
from quota.usage import UsageRecord
from serving.metering import request_usage
from serving.requests_registry import InflightRequest


def ended(stop_reason: str, *deltas: tuple[GenerationDelta, float]) -> InflightRequest:
    entry = InflightRequest(GenerationRequest("alpha/r-1", "small", "the fox", 16), 4, 100.0, "r-1")
    for delta, at in deltas:
        entry.apply(delta, at)
    entry.finish(stop_reason)
    return entry


def test_the_servers_counts_and_the_requests_times_make_its_record() -> None:
    entry = ended(
        "stop",
        (GenerationDelta("a", (1,)), 101.0),
        (GenerationDelta("b", (2,)), 101.5),
        (GenerationDelta(finish_reason="stop", usage=Usage(4, 6, 2, 3)), 102.0),
    )
    rec = request_usage(entry, team_id="alpha", request_class="bulk", record_id="lease-9", ended_at=103.0)
    # 4 prompt tokens × 3 s + 2 completion tokens × 2 s / 2; 6 cached capped at the 4 of the prompt
    assert rec == UsageRecord(
        team_id="alpha",
        model_id="small",
        request_class="bulk",
        prompt_tokens=4,
        cached_tokens=4,
        completion_tokens=2,
        discarded_tokens=3,
        kv_token_seconds=14.0,
        record_id="lease-9",
    )


def test_a_request_cancelled_before_its_first_token_is_cancelled_and_held_its_prompt() -> None:
    rec = request_usage(ended("cancelled"), team_id="alpha", request_class="interactive", record_id="l", ended_at=100.5)
    assert (rec.cancelled, rec.prompt_tokens, rec.completion_tokens, rec.kv_token_seconds) == (True, 4, 0, 2.0)
