"""StreamShares: a team below its guaranteed share always gets a stream while the process has
one; beyond it, it borrows only below max − reserve; past the maximum, every claim is FULL."""

from __future__ import annotations

import pytest

from quota.stream_shares import StreamShares, StreamVerdict

ADMITTED, OVER_SHARE, FULL = StreamVerdict.ADMITTED, StreamVerdict.OVER_SHARE, StreamVerdict.FULL


def open_streams(shares: StreamShares, team: str, count: int) -> list[StreamVerdict]:
    return [shares.claim(team).verdict for _ in range(count)]


def test_shares_follow_every_configured_team_s_weight() -> None:
    shares = StreamShares(100, {"chat": 3, "search": 2, "analytics": 1})
    assert [shares.share(t) for t in ("chat", "search", "analytics")] == [50, 33, 16]
    assert shares.share("unconfigured") == 14  # weight 1 beside the six configured
    assert StreamShares(3, {"a": 1, "b": 1000}).share("a") == 1  # never below one


def test_a_lone_team_borrows_up_to_the_reserve_and_is_refused_past_it() -> None:
    shares = StreamShares(100, {"flood": 1, "bystander": 1}, reserve_fraction=0.1)
    assert shares.borrow_limit == 90
    assert open_streams(shares, "flood", 90) == [ADMITTED] * 90
    refused = shares.claim("flood")
    assert (refused.verdict, refused.held, refused.share, refused.total) == (OVER_SHARE, 90, 50, 90)
    assert shares.total == 90  # a refusal counts nothing


def test_a_bystander_gets_the_reserve_at_once_while_another_team_floods() -> None:
    shares = StreamShares(100, {"flood": 1, "bystander": 1}, reserve_fraction=0.1)
    open_streams(shares, "flood", 95)  # the flood's last five are refused
    assert open_streams(shares, "bystander", 10) == [ADMITTED] * 10
    assert shares.claim("bystander").verdict is FULL  # the process's maximum, whoever asks
    assert shares.claim("flood").verdict is FULL


def test_as_the_flood_s_streams_end_the_bystander_reaches_its_share_and_the_flood_stays_out() -> None:
    shares = StreamShares(100, {"flood": 1, "bystander": 1}, reserve_fraction=0.1)
    open_streams(shares, "flood", 90)
    open_streams(shares, "bystander", 10)
    for _ in range(40):  # forty flood replies end; the bystander takes each freed slot
        shares.release("flood")
        assert shares.claim("flood").verdict is OVER_SHARE  # past its 50, the process past 90
        assert shares.claim("bystander").verdict is ADMITTED
    assert (shares.held("flood"), shares.held("bystander"), shares.total) == (50, 50, 100)


def test_release_forgets_idle_teams_and_frees_their_slots() -> None:
    shares = StreamShares(4, {"a": 1})
    assert open_streams(shares, "a", 4) == [ADMITTED] * 4
    assert shares.claim("a").verdict is FULL
    for _ in range(4):
        shares.release("a")
    assert (shares.total, shares.held("a")) == (0, 0)
    with pytest.raises(KeyError):
        shares.release("a")  # more releases than claims is a bug, not a count below zero


@pytest.mark.parametrize(("max_streams", "reserve"), [(0, 0.1), (10, 1.0), (10, -0.1)])
def test_bad_settings_are_refused(max_streams: int, reserve: float) -> None:
    with pytest.raises(ValueError):
        StreamShares(max_streams, {"a": 1}, reserve)
