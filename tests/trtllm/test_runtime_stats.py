"""TensorRT-LLM runtime stats records as EngineStats, bounded by the engine loop's own counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.stats import EngineStats
from trtllm.runtime_stats import RequestCounts, engine_stats, parse_stats_record

FALLBACK = EngineStats(
    max_blocks=128,
    free_blocks=128,
    used_blocks=0,
    tokens_per_block=32,
    reused_blocks=0,
    active_requests=0,
    max_requests=8,
    scheduled_requests=0,
    context_requests=0,
    waiting_requests=0,
)
RECORD: dict[str, Any] = {
    "numActiveRequests": 3,
    "numQueuedRequests": 2,
    "maxNumActiveRequests": 16,
    "kvCacheStats": {
        "maxNumBlocks": 200,
        "freeNumBlocks": 150,
        "usedNumBlocks": 50,
        "tokensPerBlock": 64,
        "reusedBlocks": 7,
    },
    "inflightBatchingStats": {"numScheduledRequests": 3, "numContextRequests": 1},
}
BUSY = RequestCounts(interactive=4, bulk=2)  # 6 in the LLM, none held


def test_records_are_json_text_or_mappings() -> None:
    assert parse_stats_record(json.dumps(RECORD)) == RECORD
    assert parse_stats_record(RECORD) is RECORD


@pytest.mark.parametrize("record", ["[1, 2]", "not json", '"text"'])
def test_a_record_that_is_no_json_object_is_an_error(record: str) -> None:
    with pytest.raises(ValueError):
        parse_stats_record(record)


def test_request_counts() -> None:
    counts = RequestCounts(interactive=2, bulk=5, held=3)
    assert (counts.unfinished, counts.in_llm) == (7, 4)


def test_a_record_within_the_loops_counts_is_published_as_is() -> None:
    assert engine_stats(RECORD, BUSY, FALLBACK) == EngineStats(
        max_blocks=200,
        free_blocks=150,
        used_blocks=50,
        tokens_per_block=64,
        reused_blocks=7,
        active_requests=3,
        max_requests=16,
        scheduled_requests=3,
        context_requests=1,
        waiting_requests=2,
        interactive_requests=4,
        bulk_requests=2,
    )


def test_before_any_record_the_fallback_figures_with_the_loops_counts() -> None:
    counts = RequestCounts(interactive=1, bulk=3, held=2)
    assert engine_stats(None, counts, FALLBACK) == EngineStats(
        128, 128, 0, 32, 0, 0, 8, 0, 0, waiting_requests=2, interactive_requests=1, bulk_requests=3
    )


def test_missing_and_malformed_keys_fall_back_one_by_one() -> None:
    record = {
        "numActiveRequests": 2.0,  # a float is read as a number
        "numQueuedRequests": True,  # a bool is not a count
        "maxNumActiveRequests": "16",  # nor is text
        "kvCacheStats": {"usedNumBlocks": 9},
        "inflightBatchingStats": [1, 2],  # not an object: every key falls back
    }
    assert engine_stats(record, BUSY, FALLBACK) == EngineStats(
        128, 128, 9, 32, 0, 2, 8, 0, 0, 0, interactive_requests=4, bulk_requests=2
    )


def test_request_figures_are_capped_by_what_the_loop_has_in_the_llm() -> None:
    counts = RequestCounts(interactive=1, bulk=3, held=1)  # 3 in the LLM, 1 held here
    record = {**RECORD, "numActiveRequests": 5, "numQueuedRequests": 4}
    stats = engine_stats(record, counts, FALLBACK)
    assert stats.request_metrics() == {"active": 3, "max": 16, "scheduled": 3, "context": 1, "waiting": 1}
    record = {**RECORD, "numActiveRequests": 1, "numQueuedRequests": 4}
    stats = engine_stats(record, counts, FALLBACK)
    # 1 active, at most 3 - 1 queued in the LLM, and the held one; scheduled <= active.
    assert stats.request_metrics() == {"active": 1, "max": 16, "scheduled": 1, "context": 1, "waiting": 3}


def test_with_nothing_unfinished_no_block_is_used_and_no_request_runs() -> None:
    stats = engine_stats(RECORD, RequestCounts(), FALLBACK)
    assert stats.kv_cache_block_metrics() == {"max": 200, "free": 200, "used": 0, "tokens_per": 64, "reused": 7}
    assert stats.request_metrics() == {"active": 0, "max": 16, "scheduled": 0, "context": 0, "waiting": 0}
    assert stats.class_metrics() == {"priority": 0, "interactive": 0, "flex": 0, "bulk": 0}
