"""The GPU step cost: the brief's figures by default, and a linear model fitted to samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cost_model import LinearCost, RooflineCost, StepSample, fit_linear, load_profile, read_alone_s
from simulator.settings import SimSettings, server_capacity


def test_defaults_reproduce_the_brief_35_replies_at_30_tokens_a_second() -> None:
    cost = RooflineCost()
    step = cost.step_s(prefill_tokens=0, decode_tokens=35, context_tokens=35 * 2150)
    assert step == pytest.approx(0.033, abs=0.001)
    assert 35 / step == pytest.approx(1050, rel=0.05)  # tokens a second per GPU
    assert 1 / step == pytest.approx(30, rel=0.05)  # per reply


def test_a_prefill_chunk_rides_along_with_decodes_until_compute_saturates() -> None:
    cost = RooflineCost()
    decode_only = cost.step_s(0, 35, 75_000)
    assert cost.step_s(200, 35, 75_200) == pytest.approx(decode_only, rel=0.01)  # nearly free
    # 2,048 tokens at 16,000 tokens/s: compute-bound.
    assert cost.step_s(2048, 35, 77_000) == pytest.approx((2048 + 35) / 16_000)


def test_the_autoscaler_is_told_the_brief_s_server() -> None:
    capacity = server_capacity(SimSettings(), prompt_mean=2000, reply_mean=300, startup_s=480)
    assert capacity.requests == pytest.approx(80_000 / 2300)
    assert capacity.avg_request_s == pytest.approx(10, rel=0.05)  # 300 tokens at ~30/s
    assert capacity.startup_s == 480


def test_fit_linear_recovers_the_coefficients() -> None:
    truth = LinearCost(base_s=0.004, per_token_s=2e-5, per_context_token_s=3e-8)
    samples = [
        StepSample(tokens, context, truth.step_s(tokens, 0, context))
        for tokens in (1, 16, 64, 256)
        for context in (100, 5_000, 40_000)
    ]
    fitted = fit_linear(samples)
    assert fitted.base_s == pytest.approx(truth.base_s, rel=1e-6)
    assert fitted.per_token_s == pytest.approx(truth.per_token_s, rel=1e-6)
    assert fitted.per_context_token_s == pytest.approx(truth.per_context_token_s, rel=1e-6)


def test_load_profile_reads_samples_and_refuses_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    rows = [
        {"tokens": t, "context_tokens": c, "seconds": 0.01 + 1e-4 * t + 1e-7 * c}
        for t in (1, 10, 100, 200)
        for c in (0, 1_000, 30_000)
    ]
    path.write_text(json.dumps({"samples": rows}))
    fitted = load_profile(path)
    assert fitted.step_s(50, 0, 2_000) == pytest.approx(0.01 + 1e-4 * 50 + 1e-7 * 2_000, rel=1e-6)
    path.write_text(json.dumps([{"tokens": 1}] * 3))
    with pytest.raises(ValueError, match="context_tokens"):
        load_profile(path)
    with pytest.raises(ValueError, match="at least 3"):
        fit_linear([StepSample(1, 1, 0.1)])


def test_a_prompt_read_alone_takes_its_chunks_at_the_compute_rate() -> None:
    """30,000 tokens in 512-token steps: 59 compute-bound steps of 32 ms (the context read stays
    under them), ~1.9 s; nothing to read, nothing to wait for."""
    cost = RooflineCost()
    assert read_alone_s(cost, 30_000, 512) == pytest.approx(30_000 / 16_000, rel=0.01)
    assert read_alone_s(cost, 100, 512) == pytest.approx(cost.step_s(100, 0, 100))
    assert read_alone_s(cost, 0, 512) == 0.0
