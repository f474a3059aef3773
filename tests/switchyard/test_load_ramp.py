"""The load generator's ramp: parsing, the rate at a time, and the deterministic arrivals."""

from __future__ import annotations

import pytest

from switchyard.load_generator import LoadRun, RequestOutcome, percentile
from switchyard.load_ramp import Ramp


def test_parse_and_rate_between_points() -> None:
    ramp = Ramp.parse("0:1, 60:6,180:6,240:1")
    assert ramp.points == ((0, 1), (60, 6), (180, 6), (240, 1))
    assert ramp.duration_s == 240
    assert [ramp.rate_at(t) for t in (0, 30, 60, 120, 210, 240, 241, -1)] == [1, 3.5, 6, 6, 3.5, 1, 0, 0]
    assert ramp.peak_at() == 60


@pytest.mark.parametrize(
    ("text", "message"),
    [("0:1", "at least two"), ("5:1,10:2", "starts at t=0"), ("0:1,10", "TIME:RATE"), ("0:1,0:2", "increase"),
     ("0:1,10:-1", ">= 0"), ("0:a,10:1", "numbers")],
)  # fmt: skip
def test_bad_ramps_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Ramp.parse(text)


def test_arrivals_follow_the_integral_of_the_rate() -> None:
    assert Ramp.parse("0:2,3:2").arrivals() == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
    # 0 → 4 req/s over 2 s: ∫ = t², so request k at √k.
    assert Ramp.parse("0:0,2:4").arrivals() == pytest.approx([1.0, 2**0.5, 3**0.5, 2.0])
    ramp = Ramp.parse("0:1,60:6,180:6,240:1")
    assert len(ramp.arrivals()) == 1140  # the area under the ramp: 210 + 720 + 210
    assert ramp.arrivals() == sorted(ramp.arrivals())


def test_reports_count_finished_errors_and_cut_replies() -> None:
    run = LoadRun(
        [
            RequestOutcome(0.5, first_token_at=0.7, ended_at=2.0, stop_reason="length"),
            RequestOutcome(1.0, ended_at=1.1, error="HTTP 429"),
            RequestOutcome(1.5, first_token_at=1.6, ended_at=1.9),  # tokens, then no final event
            RequestOutcome(4.0),  # still running
            RequestOutcome(7.0),  # sent after the interval
        ]
    )
    report = run.report(0.0, 5.0)
    assert (report.sent, report.finished, report.errors, report.cut, report.in_flight) == (4, 1, 1, 1, 1)
    assert report.rate == pytest.approx(0.8)
    assert (report.ttft_p50_s, report.ttft_p99_s) == pytest.approx((0.1, 0.2))
    assert percentile([], 0.5) is None
