"""`echoed`: what an error message shows of a caller's value, exactly."""

from __future__ import annotations

from contracts.caller_echo import ECHO_CHARS, echoed


def test_a_short_value_is_quoted_whole() -> None:
    assert echoed("small") == "'small'"
    assert echoed("it's") == '"it\'s"'
    assert echoed("x" * ECHO_CHARS) == repr("x" * ECHO_CHARS)  # at the limit: still whole


def test_a_long_value_is_its_prefix_an_ellipsis_and_its_length() -> None:
    assert echoed("abcdef", limit=3) == "'abc…' (6 characters)"
    shown = echoed("m" * 3_000_000)
    assert shown == "'" + "m" * ECHO_CHARS + "…' (3,000,000 characters)"
    assert echoed("x" * (ECHO_CHARS + 1)) == "'" + "x" * ECHO_CHARS + f"…' ({ECHO_CHARS + 1} characters)"


def test_the_prefix_is_quoted_as_repr_quotes_it() -> None:
    assert echoed("a\nb\x00c", limit=4) == "'a\\nb\\x00…' (5 characters)"
    assert echoed("é" * 10, limit=2) == "'éé…' (10 characters)"


def test_other_values_are_their_repr_cut_the_same_way() -> None:
    assert echoed(None) == "None"
    assert echoed([1, 2]) == "[1, 2]"
    assert echoed(list(range(1000)), limit=10) == "[0, 1, 2, … (4,890 characters)"
