"""PrefixIndex: longest leading run per server, exact LRU eviction, forgetting servers, the
per-entry server cap."""

from __future__ import annotations

import pytest

from router.prefix_index import PrefixIndex


def test_each_server_gets_the_length_of_its_leading_run() -> None:
    index = PrefixIndex()
    index.record([1, 2, 3], "a")
    index.record([1, 2], "b")
    index.record([1], "c")
    assert index.matches([1, 2, 3, 4]) == {"a": 3, "b": 2, "c": 1}
    assert index.matches([1, 2, 9]) == {"a": 2, "b": 2, "c": 1}
    assert index.matches([9, 1, 2]) == {}
    assert index.matches([]) == {}
    assert len(index) == 3


def test_a_gap_ends_a_servers_run() -> None:
    index = PrefixIndex()
    index.record([1, 2, 3], "a")
    index.record([1, 3], "d")  # listed at blocks 0 and 2, not 1
    assert index.matches([1, 2, 3]) == {"a": 3, "d": 1}


def test_recording_again_does_not_duplicate_a_server() -> None:
    index = PrefixIndex(max_servers_per_entry=4)
    for server_id in ("a", "a", "b", "c", "d"):
        index.record([1], server_id)
    assert index.matches([1]) == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_lru_eviction_takes_the_deepest_blocks_of_the_least_recent_prompt_first() -> None:
    index = PrefixIndex(max_entries=5)
    index.record([1, 2, 3], "a")  # order: 3 2 1
    index.record([10, 11], "b")  # 3 2 1 11 10
    assert len(index) == 5
    index.record([20], "c")  # 3 evicted: 2 1 11 10 20
    assert len(index) == 5
    assert index.matches([1, 2, 3]) == {"a": 2}
    index.record([1], "a")  # touch: 2 11 10 20 1
    index.record([30, 31], "c")  # 2 and 11 evicted: 10 20 1 31 30
    assert len(index) == 5
    assert index.matches([1, 2]) == {"a": 1}
    assert index.matches([10, 11]) == {"b": 1}
    assert index.matches([20]) == {"c": 1}
    assert index.matches([30, 31]) == {"c": 2}


def test_a_prompt_longer_than_the_index_keeps_its_leading_blocks() -> None:
    index = PrefixIndex(max_entries=3)
    index.record([1, 2, 3, 4, 5], "a")
    assert len(index) == 3
    assert index.matches([1, 2, 3, 4, 5]) == {"a": 3}


def test_matching_does_not_refresh_recency() -> None:
    index = PrefixIndex(max_entries=2)
    index.record([1], "a")
    index.record([2], "b")
    assert index.matches([1]) == {"a": 1}
    index.record([3], "c")  # 1 is still the least recently recorded
    assert index.matches([1]) == {}
    assert index.matches([2]) == {"b": 1}


def test_forget_server_removes_it_everywhere_and_drops_empty_entries() -> None:
    index = PrefixIndex()
    index.record([1, 2], "a")
    index.record([1, 2], "b")
    index.record([5, 6], "a")
    assert len(index) == 4
    index.forget_server("a")
    assert index.matches([1, 2]) == {"b": 2}
    assert index.matches([5, 6]) == {}
    assert len(index) == 2
    index.forget_server("nobody")
    assert len(index) == 2


def test_each_entry_keeps_its_most_recent_servers() -> None:
    index = PrefixIndex(max_servers_per_entry=4)
    for server_id in ("s0", "s1", "s2", "s3", "s4"):
        index.record([1], server_id)
    assert index.matches([1]) == {"s1": 1, "s2": 1, "s3": 1, "s4": 1}
    index.record([1], "s1")  # now the most recent: s2 is the oldest
    index.record([1], "s5")
    assert index.matches([1]) == {"s1": 1, "s3": 1, "s4": 1, "s5": 1}
    assert len(index) == 1


def test_runs_ignore_entry_order_and_servers_that_join_deeper() -> None:
    index = PrefixIndex()
    index.record([1, 2, 3], "a")
    index.record([1, 2, 3], "b")
    index.record([2], "a")  # entry 2 now lists b before a
    index.record([2, 3], "c")  # c holds blocks 1 and 2 but not block 0
    assert index.matches([1, 2, 3]) == {"a": 3, "b": 3}
    assert index.matches([2, 3]) == {"a": 2, "b": 2, "c": 2}


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        PrefixIndex(max_entries=0)
    with pytest.raises(ValueError, match="max_servers_per_entry"):
        PrefixIndex(max_servers_per_entry=0)
