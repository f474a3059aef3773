"""The usage formula: what one ended request is billed and metered, exact to the token and the
token-second (times chosen exact in binary, so every figure compares with ==)."""

from __future__ import annotations

from typing import Any

import pytest

from quota.usage import UsageRecord
from quota.usage_formula import kv_token_seconds, request_usage


def usage(**overrides: Any) -> UsageRecord:
    values: dict[str, Any] = {
        "team_id": "alpha",
        "model_id": "small",
        "request_class": "interactive",
        "prompt_tokens": 100,
        "cached_tokens": 0,
        "completion_tokens": 40,
        "discarded_tokens": 0,
        "cancelled": False,
        "started_at": 10.0,
        "first_token_at": 12.0,
        "ended_at": 14.0,
        "record_id": "lease-1",
    }
    return request_usage(**{**values, **overrides})


def test_the_prompt_is_held_throughout_and_the_reply_on_average_half_from_its_first_token() -> None:
    # 100 prompt tokens × 4 s + 40 completion tokens × 2 s / 2
    assert kv_token_seconds(100, 40, started_at=10.0, first_token_at=12.0, ended_at=14.0) == 440.0
    assert usage() == UsageRecord(
        team_id="alpha",
        model_id="small",
        request_class="interactive",
        prompt_tokens=100,
        completion_tokens=40,
        kv_token_seconds=440.0,
        record_id="lease-1",
    )


def test_zero_tokens_hold_nothing_however_long() -> None:
    assert kv_token_seconds(0, 0, started_at=0.0, first_token_at=None, ended_at=3600.0) == 0.0
    rec = usage(prompt_tokens=0, completion_tokens=0, first_token_at=None)
    assert rec.increments() == {"requests": 1}  # still one request, nothing else


def test_a_request_that_ended_at_once_held_nothing() -> None:
    assert kv_token_seconds(100, 40, started_at=10.0, first_token_at=10.0, ended_at=10.0) == 0.0


def test_cancelled_before_its_first_token_held_its_prompt_only() -> None:
    rec = usage(prompt_tokens=30, completion_tokens=0, cancelled=True, first_token_at=None, ended_at=11.5)
    assert (rec.cancelled, rec.completion_tokens, rec.kv_token_seconds) == (True, 0, 45.0)  # 30 × 1.5 s


def test_cancelled_mid_reply_counts_the_tokens_it_got() -> None:
    rec = usage(prompt_tokens=8, completion_tokens=6, cancelled=True, first_token_at=11.0, ended_at=12.0)
    # 8 × 2 s + 6 × 1 s / 2
    assert (rec.cancelled, rec.completion_tokens, rec.kv_token_seconds) == (True, 6, 19.0)
    assert rec.increments()["cancelled"] == 1


def test_completion_counted_without_a_first_token_time_adds_no_token_seconds() -> None:
    # The server's counters may report tokens no delta carried: no first token, no reply held.
    assert kv_token_seconds(10, 5, started_at=0.0, first_token_at=None, ended_at=2.0) == 20.0


def test_cached_prompt_tokens_are_billed_as_part_of_the_prompt_and_hold_kv_as_much() -> None:
    rec = usage(cached_tokens=64)
    assert (rec.prompt_tokens, rec.cached_tokens, rec.kv_token_seconds) == (100, 64, 440.0)


def test_cached_tokens_are_capped_at_the_prompt() -> None:
    assert usage(cached_tokens=128).cached_tokens == 100
    assert usage(prompt_tokens=0, cached_tokens=16, completion_tokens=0).cached_tokens == 0


def test_discarded_tokens_are_metered_apart_and_hold_no_kv_here() -> None:
    rec = usage(discarded_tokens=7)
    assert (rec.completion_tokens, rec.discarded_tokens, rec.kv_token_seconds) == (40, 7, 440.0)


def test_a_reply_that_reached_no_one_is_discarded_not_billed_and_held_its_kv() -> None:
    rec = usage(discarded_tokens=7, delivered=False)
    assert (rec.completion_tokens, rec.discarded_tokens, rec.kv_token_seconds) == (0, 47, 440.0)
    assert rec.increments().keys() == {"requests", "prompt_tokens", "discarded_tokens", "kv_token_seconds"}


def test_a_clock_that_ran_backwards_counts_no_time() -> None:
    assert kv_token_seconds(100, 40, started_at=14.0, first_token_at=15.0, ended_at=10.0) == 0.0
    # The reply's stretch alone backwards: the prompt still counts.
    assert kv_token_seconds(100, 40, started_at=10.0, first_token_at=15.0, ended_at=14.0) == 400.0


def test_the_record_id_and_labels_pass_through() -> None:
    rec = usage(team_id="beta", model_id="large", request_class="bulk", record_id=None)
    assert (rec.team_id, rec.model_id, rec.request_class, rec.record_id) == ("beta", "large", "bulk", None)


def test_negative_counts_are_refused_by_the_record() -> None:
    with pytest.raises(ValueError, match="negative"):
        usage(completion_tokens=-1)
