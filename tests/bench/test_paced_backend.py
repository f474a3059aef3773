"""The paced backend: max_tokens one-token deltas, the last with its finish reason, at the pace."""

from __future__ import annotations

import time

import pytest

from bench.paced_backend import TOKEN_ID, Pace, PacedBackend
from contracts.generation import GenerationRequest


async def test_a_reply_is_max_tokens_deltas_at_its_pace() -> None:
    backend = PacedBackend(Pace(first_s=0.0, gap_s=(0.01, 0.02)), {"pool": "model"})
    began = time.monotonic()
    deltas = [delta async for delta in backend.generate(GenerationRequest("r1", "pool", "hi", max_tokens=5))]
    took = time.monotonic() - began
    assert [d.token_ids for d in deltas] == [(TOKEN_ID,)] * 5
    assert [d.finish_reason for d in deltas] == [None, None, None, None, "length"]
    assert 0.04 <= took < 1.0  # four gaps of 10-20 ms after a first token at once
    assert [(r.pool_id, r.model_id, r.ready) for r in await backend.readiness()] == [("pool", "model", True)]


def test_a_pace_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError):
        Pace(first_s=0.0, gap_s=(2.0, 1.0))
