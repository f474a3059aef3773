"""Deadlines: durations and RFC 3339 times to unix time, refusals that say why, ETAs in words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bulk.deadlines import format_duration, parse_deadline

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC).timestamp()
DAY = 86400.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("6h", 6 * 3600),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("1h30m15s", 5415),
        ("24h", DAY),
        ("1d", DAY),
        ("1D", DAY),
        (" 45m ", 2700),
    ],
)
def test_durations_count_from_now(value: str, seconds: float) -> None:
    assert parse_deadline(value, NOW, DAY) == NOW + seconds


@pytest.mark.parametrize("value", [None, "", "   "])
def test_no_deadline_means_the_maximum(value: str | None) -> None:
    assert parse_deadline(value, NOW, DAY) == NOW + DAY


def test_rfc3339_times_with_zone_or_offset() -> None:
    assert parse_deadline("2026-11-30T09:00:00Z", NOW, DAY) == NOW + 21 * 3600
    # 11:00 at +02:00 is 09:00 UTC.
    assert parse_deadline("2026-11-30T11:00:00+02:00", NOW, DAY) == NOW + 21 * 3600
    assert parse_deadline("2026-11-29T12:00:00.5Z", NOW, DAY) == NOW + 0.5


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "neither a duration .* nor an RFC 3339 time"),
        ("30", "neither a duration"),
        ("1m1h", "neither a duration"),
        ("-5m", "neither a duration"),
        ("0s", "no time at all"),
        ("25h", r"deadline must be within 24h \(got '25h'\)"),
        ("2d", "deadline must be within 24h"),
        ("2026-11-30T12:00:01Z", "deadline must be within 24h"),
        ("2026-11-29T11:59:59Z", "is in the past"),
        ("2026-11-30T09:00:00", "no time zone"),
    ],
)
def test_refusals_say_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_deadline(value, NOW, DAY)


def test_the_maximum_is_shown_as_a_duration_one_could_send() -> None:
    with pytest.raises(ValueError, match="within 1h30m "):
        parse_deadline("2h", NOW, 5400)
    assert parse_deadline("1h30m", NOW, 5400) == NOW + 5400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-3, "0s"),
        (42, "42s"),
        (41.2, "42s"),  # rounded up: an ETA is never shown shorter than it is
        (60, "1m 00s"),
        (303, "5m 03s"),
        (3900, "1h 05m"),
        (DAY + 3 * 3600, "1d 03h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("value", ["9" * 400 + "s", "99999999999999999999999d", "1" * 5000 + "h", "10000000000000s"])
def test_an_enormous_duration_is_a_clear_refusal_not_an_overflow(value: str) -> None:
    with pytest.raises(ValueError, match="deadline"):
        parse_deadline(value, NOW, 86400)
