"""The scenarios carry the brief's numbers: rates, bulk volume, lengths, teams, surprises."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from simulator.scenario import DAY, HOUR, SCENARIOS, scenario


def test_weekday_interactive_peaks_at_1000_and_falls_to_a_third_at_night() -> None:
    day = scenario("weekday")
    rates = [day.rate_at(t) for t in range(0, int(DAY), 60)]
    assert max(rates) == pytest.approx(1000)
    assert day.rate_at(3 * HOUR) == pytest.approx(1000 / 3)
    assert day.rate_at(7 * HOUR) < day.rate_at(8 * HOUR) < day.rate_at(9 * HOUR) < day.rate_at(10 * HOUR)
    assert day.max_rate() >= max(rates)


def test_weekday_bulk_is_30_million_a_day_plus_yesterday_s_carry_over() -> None:
    day = scenario("weekday")
    batches = day.batches()
    today = sum(b.count for b in batches if b.batch_id.split("-h")[-1][0] != "-")
    carried = sum(b.count for b in batches if b.batch_id.split("-h")[-1][0] == "-")
    assert today == pytest.approx(30e6, rel=0.01)
    assert carried == pytest.approx(15e6, rel=0.01)  # the last 12 h of yesterday
    for batch in batches:
        assert batch.arrival_s + batch.deadline_s <= DAY * 2  # due within 24 h of submission
    yesterday_noon = next(b for b in batches if b.batch_id.endswith("h-12"))
    assert yesterday_noon.arrival_s == 0.0 and yesterday_noon.deadline_s == pytest.approx(12 * HOUR)


def test_lengths_match_the_brief() -> None:
    day = scenario("weekday")
    rng = random.Random(7)
    prompts = [day.prompt.sample(rng) for _ in range(50_000)]
    replies = [day.reply.sample(rng) for _ in range(50_000)]
    assert sum(prompts) / len(prompts) == pytest.approx(2000, rel=0.05)
    assert max(prompts) <= 30_000 and max(prompts) > 25_000  # documents up to 30,000
    assert sum(replies) / len(replies) == pytest.approx(300, rel=0.05)
    assert min(replies) >= 4 and max(replies) <= 2000


def test_teams_split_the_traffic_whole() -> None:
    day = scenario("weekday")
    assert sum(t.interactive_share for t in day.teams) == pytest.approx(1.0)
    assert sum(t.bulk_share for t in day.teams) == pytest.approx(1.0)
    assert len({t.weight for t in day.teams}) > 1


def test_the_other_scenarios_change_one_thing() -> None:
    monday = scenario("monday-9am")
    extra = [b for b in monday.batches() if b.batch_id == "analytics-monday"]
    assert extra and extra[0].count == 5_000_000 and extra[0].arrival_s == 9 * HOUR
    flash = scenario("flash-crowd")
    assert flash.flash is not None
    during = flash.flash.start_s + 60
    assert flash.rate_at(during) == pytest.approx(scenario("weekday").rate_at(during) * flash.flash.multiplier)
    assert scenario("failures").failures_per_server_hour > 0
    assert set(SCENARIOS) == {"weekday", "monday-9am", "failures", "flash-crowd", "weekday-surge", "weekday-tiers"}
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario("tuesday")


def test_the_tiered_weekday_splits_today_s_people_and_surges_unforecast() -> None:
    weekday, surge, tiers = scenario("weekday"), scenario("weekday-surge"), scenario("weekday-tiers")
    assert weekday.class_mix == (("interactive", 1.0),) and surge.class_mix == weekday.class_mix
    assert dict(tiers.class_mix) == {"priority": 0.10, "interactive": 0.75, "flex": 0.15}
    assert tiers.demand_share == pytest.approx(0.85)  # what the autoscaler starts servers for
    assert tiers.flash == surge.flash and tiers.flash is not None
    assert (tiers.flash.start_s, tiers.flash.duration_s, tiers.flash.multiplier) == (14 * HOUR, 1800.0, 1.5)
    assert tiers.focus_s == (14 * HOUR, 14.5 * HOUR)
    assert tiers.batches() == weekday.batches()  # batch is today's bulk
    assert tiers.rate_at(10 * HOUR) == weekday.rate_at(10 * HOUR)  # the people's volume is today's


def test_a_class_mix_is_people_s_classes_summing_to_one() -> None:
    base = scenario("weekday")
    with pytest.raises(ValueError, match="sum to 1"):
        replace(base, class_mix=(("priority", 0.5), ("interactive", 0.4)))
    with pytest.raises(ValueError, match="at most once"):
        replace(base, class_mix=(("bulk", 1.0),))


def test_a_smaller_fleet_sees_the_day_in_proportion() -> None:
    small = scenario("weekday", gpus=8)
    full = scenario("weekday")
    assert small.rate_at(10 * HOUR) == pytest.approx(full.rate_at(10 * HOUR) * 8 / 400)
    assert sum(b.count for b in small.batches()) == pytest.approx(
        sum(b.count for b in full.batches()) * 8 / 400, rel=0.01
    )
