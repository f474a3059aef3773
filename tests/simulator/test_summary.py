"""S6's time-to-first-token verdicts: over every prompt, and beyond each prompt's own read."""

from __future__ import annotations

from simulator.recorder import Recorder, TtftSample
from simulator.scenario import HOUR, scenario
from simulator.summary import summarize


def test_documents_are_judged_beyond_their_own_read() -> None:
    """98 chat prompts at 0.5 s and 2 documents at 2.5 s, 2.1 s of which is their own read: the
    p99 over every prompt misses 1 s; chat-sized and beyond-the-read meet it."""
    day = scenario("weekday", gpus=8, hours=24)
    recorder = Recorder(day.hours)
    for i in range(98):
        recorder.first_token(7 * HOUR + i, TtftSample(0.5, True, 0.45))
    for i in range(2):
        recorder.first_token(8 * HOUR + i, TtftSample(2.5, False, 0.4))
    summary = summarize("p", recorder, day, wall_s=0.0)
    assert summary.ramp_ttft_p99_s is not None and summary.ramp_ttft_p99_s > 2.0
    assert summary.ramp_met is False
    assert summary.ramp_met_beyond_reads is True
    recorder.first_token(9 * HOUR, TtftSample(1.6, True, 1.5))  # a chat prompt that waited
    recorder.first_token(9 * HOUR + 1, TtftSample(1.6, True, 1.5))
    assert summarize("p", recorder, day, wall_s=0.0).ramp_met_beyond_reads is False


def test_a_run_short_of_the_ramp_judges_nothing() -> None:
    day = scenario("weekday", gpus=8, hours=2)
    summary = summarize("p", Recorder(day.hours), day, wall_s=0.0)
    assert summary.ramp_met is None and summary.ramp_met_beyond_reads is None
