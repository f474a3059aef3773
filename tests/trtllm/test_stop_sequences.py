"""StopSequenceMatcher: where a streamed reply first ends with a stop sequence."""

from __future__ import annotations

import pytest

from trtllm.stop_sequences import StopSequenceMatcher


def test_a_match_inside_a_delta_keeps_the_tokens_up_to_its_end() -> None:
    matcher = StopSequenceMatcher([(7, 8)])
    assert matcher.feed([5, 7, 8, 9, 10]) == 3


def test_a_match_may_span_deltas() -> None:
    matcher = StopSequenceMatcher([(1, 2, 3)])
    assert matcher.feed([0, 1]) is None
    assert matcher.feed([2]) is None
    assert matcher.feed([3, 4]) == 1


def test_a_match_may_span_resumed_and_new_tokens() -> None:
    matcher = StopSequenceMatcher([(6, 7, 8)], resumed=(1, 6, 7))
    assert matcher.feed([8]) == 1


def test_a_stop_sequence_wholly_inside_the_resumed_tokens_is_not_a_new_match() -> None:
    matcher = StopSequenceMatcher([(6, 7)], resumed=(6, 7))
    assert matcher.feed([9, 6]) is None
    assert matcher.feed([7]) == 1


def test_resumed_tokens_shorter_than_the_stop_sequence() -> None:
    matcher = StopSequenceMatcher([(4, 5, 6)], resumed=(5,))
    assert matcher.feed([6]) is None  # (5, 6) is no match; 4 was never there
    assert matcher.feed([4, 5, 6]) == 3


def test_the_first_match_wins_and_later_tokens_are_not_looked_at() -> None:
    matcher = StopSequenceMatcher([(3,), (2,)])
    assert matcher.feed([1, 2, 3]) == 2


def test_sequences_ending_at_the_same_token_match_there() -> None:
    matcher = StopSequenceMatcher([(1, 2, 3), (2, 3)])
    assert matcher.feed([9, 1, 2]) is None
    assert matcher.feed([3]) == 1


def test_a_repeated_prefix_still_matches() -> None:
    matcher = StopSequenceMatcher([(1, 1, 2)])
    assert matcher.feed([1, 1, 1, 2]) == 4


def test_a_long_reply_is_matched_late() -> None:
    matcher = StopSequenceMatcher([(50, 51), (70, 71, 72)])
    assert matcher.feed(range(40)) is None
    assert matcher.feed(range(40, 100)) == 12  # ..., 50, 51


def test_without_stop_sequences_nothing_matches() -> None:
    matcher = StopSequenceMatcher([], resumed=(1, 2))
    assert matcher.feed([1, 2, 3]) is None


def test_an_empty_stop_sequence_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        StopSequenceMatcher([(1,), ()])
