"""The probe cell's teams: the fleet's teams running bulk as one, the others as they are."""

from __future__ import annotations

import pytest

from simulator.probe import PROBE_BULK_TEAM, cell_teams
from simulator.scenario import WEEKDAY_TEAMS, TeamMix


def test_the_teams_running_bulk_run_it_as_one_of_their_summed_weight() -> None:
    teams = cell_teams(WEEKDAY_TEAMS, ("docs", "analytics"))
    assert [t.team_id for t in teams] == ["chat", "search", PROBE_BULK_TEAM]
    bulk = teams[-1]
    assert (bulk.weight, bulk.interactive_share, bulk.bulk_share) == pytest.approx((1.0, 0.0, 1.0))
    # People's shares are the fleet's: the weights still sum to the fleet's.
    assert sum(t.weight for t in teams) == pytest.approx(sum(t.weight for t in WEEKDAY_TEAMS))


def test_an_idle_bulk_team_stays_idle_and_no_bulk_merges_nothing() -> None:
    teams = cell_teams(WEEKDAY_TEAMS, ("analytics",))
    assert [t.team_id for t in teams] == ["chat", "search", "docs", PROBE_BULK_TEAM]
    assert cell_teams(WEEKDAY_TEAMS, ()) == WEEKDAY_TEAMS


def test_a_team_the_scenario_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="nowhere"):
        cell_teams((TeamMix("a", 1.0, 1.0, 0.0),), ("nowhere",))
