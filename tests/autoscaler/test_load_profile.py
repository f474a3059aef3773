"""LoadProfile: learns a day's shape from recorded days, forecasts the ramp ahead anchored on
today's level, falls back to the level without history, forgets old weeks."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from autoscaler.load_profile import LoadProfile, RatePeak

DAY = 86_400.0
HOUR = 3_600.0
MONDAY = datetime(2026, 11, 30, tzinfo=UTC).timestamp()  # 00:00 UTC


def morning_ramp(time_of_day_s: float) -> float:
    """100 req/s at night, linear to 1,000 between 7:00 and 9:00, 1,000 after."""
    return 100.0 + 900.0 * min(max((time_of_day_s - 7 * HOUR) / (2 * HOUR), 0.0), 1.0)


def record_day(profile: LoadProfile, day_start: float, rate_at: object) -> None:
    """One observation a minute, centred in each minute so a slot's mean is its centre's rate."""
    assert callable(rate_at)
    for minute in range(1440):
        offset = minute * 60.0 + 30.0
        profile.record(day_start + offset, rate_at(offset))


def trained(days: int = 2) -> LoadProfile:
    """A profile that has seen `days` days of the morning ramp before Monday."""
    profile = LoadProfile(level_tau_s=0.0)
    for back in range(days, 0, -1):
        record_day(profile, MONDAY - back * DAY, morning_ramp)
    return profile


def test_learns_the_daily_ramp_and_forecasts_it_one_startup_ahead() -> None:
    profile = trained()
    now = MONDAY + 7.5 * HOUR  # 7:30, rate 325 and rising 450 req/s an hour
    profile.record(now, 325.0)
    # 7:38 on the recorded days: 100 + 900 × 38/120.
    assert profile.forecast(now, 480.0) == pytest.approx(385.0)
    # The highest rate over the next 495 s is at its end (7:38:15).
    peak = profile.peak(now, 495.0)
    assert peak.after_s == 495.0
    assert peak.rate == pytest.approx(100.0 + 900.0 * (30 * 60 + 495) / (2 * HOUR))


def test_after_the_peak_the_highest_rate_ahead_is_now() -> None:
    profile = LoadProfile(level_tau_s=0.0)
    record_day(profile, MONDAY - DAY, lambda t: 1000.0 - 900.0 * min(max((t - 17 * HOUR) / (2 * HOUR), 0.0), 1.0))
    now = MONDAY + 17.5 * HOUR  # evening fall
    profile.record(now, 775.0)
    assert profile.forecast(now, 480.0) == pytest.approx(775.0 - 900.0 * 480 / (2 * HOUR))
    assert profile.peak(now, 495.0) == RatePeak(rate=775.0, after_s=0.0)


def test_today_running_busier_scales_the_expected_ramp() -> None:
    profile = trained()
    now = MONDAY + 7.5 * HOUR
    profile.record(now, 390.0)  # 1.2 × the usual 325
    assert profile.forecast(now, 0.0) == pytest.approx(390.0)
    assert profile.forecast(now, 480.0) == pytest.approx(390.0 + 1.2 * 60.0)


def test_the_ratio_to_the_profile_is_clamped() -> None:
    profile = trained()
    now = MONDAY + 7.5 * HOUR
    profile.record(now, 3250.0)  # ten times the usual: a flash crowd, not a new normal
    assert profile.forecast(now, 480.0) == pytest.approx(3250.0 + 2.0 * 60.0)
    profile.record(now, 32.5)  # a tenth
    assert profile.forecast(now, 480.0) == pytest.approx(32.5 + 0.5 * 60.0)


def test_the_same_weekday_wins_over_yesterday() -> None:
    profile = LoadProfile(level_tau_s=0.0)
    record_day(profile, MONDAY - 7 * DAY, lambda t: 100.0 if t < 8 * HOUR else 300.0)  # last Monday
    record_day(profile, MONDAY - DAY, lambda t: 100.0)  # Sunday
    now = MONDAY + 7 * HOUR + 52.5 * 60  # the centre of the 7:45 slot
    profile.record(now, 100.0)
    assert profile.forecast(now, 900.0) == pytest.approx(300.0)  # last Monday's 8:00 jump

    sunday_only = LoadProfile(level_tau_s=0.0)
    record_day(sunday_only, MONDAY - DAY, lambda t: 100.0)
    sunday_only.record(now, 100.0)
    assert sunday_only.forecast(now, 900.0) == pytest.approx(100.0)


def test_without_history_the_forecast_is_the_recent_level() -> None:
    profile = LoadProfile()
    assert profile.forecast(MONDAY, 480.0) == 0.0
    profile.record(MONDAY, 50.0)
    assert profile.forecast(MONDAY, 480.0) == 50.0
    assert profile.peak(MONDAY, 495.0) == RatePeak(rate=50.0, after_s=0.0)


def test_the_level_is_an_exponential_average_over_time() -> None:
    profile = LoadProfile(level_tau_s=60.0)
    profile.record(MONDAY, 100.0)
    profile.record(MONDAY + 60.0, 200.0)
    assert profile.level == pytest.approx(100.0 + 100.0 * (1.0 - math.exp(-1.0)))


def test_weeks_older_than_the_memory_are_forgotten() -> None:
    profile = LoadProfile(weeks=1)
    profile.record(MONDAY + 450.0, 500.0)
    assert profile.expected(MONDAY + 7 * DAY + 450.0) == 500.0
    profile.record(MONDAY + 8 * DAY, 100.0)  # a week and a day later: the first slot goes
    assert profile.expected(MONDAY + 7 * DAY + 450.0) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"bin_s": 7000.0}, {"bin_s": 0.0}, {"weeks": 0}, {"level_tau_s": -1.0}, {"max_ratio": 0.5}],
)
def test_invalid_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LoadProfile(**kwargs)  # type: ignore[arg-type]


def test_negative_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        LoadProfile().record(MONDAY, -1.0)


def test_a_rising_trend_the_profile_never_saw_is_carried_forward() -> None:
    """A flash crowd: no history at all, the rate climbing 1 req/s every 10 s."""
    profile = LoadProfile(level_tau_s=0.0, trend_tau_s=60.0)
    for step in range(60):
        profile.record(MONDAY + 10.0 * step, 100.0 + step)
    assert profile.slope == pytest.approx(0.1, rel=0.01)
    assert profile.forecast(MONDAY + 590.0, 480.0) == pytest.approx(159.0 + 0.1 * 480, rel=0.01)
    assert profile.peak(MONDAY + 590.0, 480.0).after_s == 480.0


def test_a_falling_trend_is_not_extrapolated_and_a_gap_resets_the_slope() -> None:
    profile = LoadProfile(level_tau_s=0.0, trend_tau_s=60.0)
    for step in range(30):
        profile.record(MONDAY + 10.0 * step, 400.0 - 5.0 * step)
    assert profile.slope < 0
    assert profile.forecast(MONDAY + 290.0, 480.0) == 255.0
    profile.record(MONDAY + 5 * HOUR, 600.0)  # hours later, much higher: a gap, not a trend
    assert profile.slope == 0.0
    assert profile.forecast(MONDAY + 5 * HOUR, 480.0) == 600.0


def test_without_a_trend_term_the_forecast_follows_the_profile_only() -> None:
    profile = LoadProfile(level_tau_s=0.0, trend_tau_s=None)
    for step in range(60):
        profile.record(MONDAY + 10.0 * step, 100.0 + step)
    assert profile.slope == 0.0
    assert profile.forecast(MONDAY + 590.0, 480.0) == 159.0
