"""Team names reach Redis keys and scoped request ids: only a safe alphabet loads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.settings import SwitchyardConfig


def config_with_team(name: str) -> SwitchyardConfig:
    return SwitchyardConfig.model_validate({"models": {}, "pools": {}, "teams": {name: {"weight": 1}}})


@pytest.mark.parametrize("name", ["dev", "e2e-other", "team_1.eu"])
def test_a_plain_team_name_loads(name: str) -> None:
    assert list(config_with_team(name).teams) == [name]


@pytest.mark.parametrize("name", ["a:b", "a/b", "", "x" * 65, "caf\u00e9", "with space"])
def test_a_name_that_could_reach_another_key_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="team name"):
        config_with_team(name)
