"""BlockManager: exact block ids, eviction order, prefix-cache hits and their limits."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.block_manager import NO_MATCH, BlockManager
from engine.sequence import Sequence

SeqFactory = Callable[..., Sequence]


def admit(bm: BlockManager, seq: Sequence) -> None:
    match = bm.match_prefix(seq)
    assert bm.can_allocate(match, seq.num_tokens)
    bm.allocate(seq, match, seq.num_tokens)


def compute_all(bm: BlockManager, seq: Sequence) -> None:
    """What a step does after the model ran: every known token is now computed."""
    seq.num_computed_tokens = seq.num_tokens
    bm.register_full_blocks(seq)


def test_allocate_takes_blocks_from_the_front_in_id_order(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = make_sequence("a", range(10), arrival=0)
    assert bm.match_prefix(seq) == NO_MATCH
    admit(bm, seq)
    assert seq.block_table == [0, 1, 2]
    assert (bm.num_used_blocks, bm.num_free_blocks) == (3, 5)
    assert bm.free_queue() == [3, 4, 5, 6, 7]
    assert [bm.block(i).ref_cnt for i in range(8)] == [1, 1, 1, 0, 0, 0, 0, 0]


def test_free_puts_unhashed_blocks_first_and_cached_tail_before_head(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = make_sequence("a", range(10), arrival=0)
    admit(bm, seq)
    compute_all(bm, seq)  # blocks 0 and 1 are full and cached; block 2 holds 2 tokens
    assert [bm.block(i).block_hash is not None for i in (0, 1, 2)] == [True, True, False]
    bm.free(seq)
    # Block 2 caches nothing: reused first. Cached blocks leave tail first: 1 before 0.
    assert bm.free_queue() == [2, 3, 4, 5, 6, 7, 1, 0]
    assert seq.block_table == []
    assert bm.num_used_blocks == 0


def test_prefix_hit_shares_full_blocks_and_counts_reuse(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(10), arrival=0)
    admit(bm, a)
    compute_all(bm, a)
    b = make_sequence("b", [*range(8), 99, 98], arrival=1)
    match = bm.match_prefix(b)
    assert (match.block_ids, match.num_tokens, match.num_free_hits) == ((0, 1), 8, 0)
    bm.allocate(b, match, b.num_tokens)
    assert b.block_table == [0, 1, 3]
    assert b.num_computed_tokens == 8
    assert [bm.block(i).ref_cnt for i in (0, 1, 2, 3)] == [2, 2, 1, 1]
    assert bm.num_reused_blocks == 2
    bm.free(a)
    assert [bm.block(i).ref_cnt for i in (0, 1, 2, 3)] == [1, 1, 0, 1]
    assert bm.free_queue() == [2, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("prompt_len", "expected_hits"),
    [(8, (0,)), (9, (0, 1)), (5, (0,)), (4, ())],
)
def test_block_holding_the_last_token_never_matches(
    make_sequence: SeqFactory, prompt_len: int, expected_hits: tuple[int, ...]
) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(12), arrival=0)
    admit(bm, a)
    compute_all(bm, a)  # blocks 0, 1, 2 cached
    b = make_sequence("b", range(prompt_len), arrival=1)
    assert bm.match_prefix(b).block_ids == expected_hits


def test_namespace_isolates_cache_entries(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(9), arrival=0, namespace="team-a")
    admit(bm, a)
    compute_all(bm, a)
    assert bm.match_prefix(make_sequence("b", range(9), arrival=1, namespace="team-b")) == NO_MATCH
    assert bm.match_prefix(make_sequence("c", range(9), arrival=2, namespace="team-a")).block_ids == (0, 1)


def test_hit_is_verified_against_stored_tokens(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(9), arrival=0)
    admit(bm, a)
    compute_all(bm, a)
    # Pretend block 1's hash collided with content it does not hold.
    block = bm.block(1)
    assert block.key is not None
    block.key = (block.key[0], (7, 7, 7, 7), block.key[2])
    assert bm.match_prefix(make_sequence("b", range(9), arrival=1)).block_ids == (0,)


def test_lazy_lru_eviction_keeps_cached_blocks_until_reused(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=6, block_size=4)
    a = make_sequence("a", range(13), arrival=0)
    admit(bm, a)  # blocks 0..3
    compute_all(bm, a)  # 0, 1, 2 cached
    bm.free(a)
    assert bm.free_queue() == [3, 4, 5, 2, 1, 0]
    c = make_sequence("c", range(100, 108), arrival=1)
    admit(bm, c)
    assert c.block_table == [3, 4]  # blocks caching nothing go first
    d = make_sequence("d", range(200, 208), arrival=2)
    admit(bm, d)
    assert d.block_table == [5, 2]  # then the least recently freed cached block: a's tail
    assert bm.block(2).block_hash is None  # evicted on reuse
    again = make_sequence("a2", range(13), arrival=3)
    match = bm.match_prefix(again)
    assert (match.block_ids, match.num_free_hits) == ((0, 1), 2)  # still cached though free
    assert not bm.can_allocate(match, again.num_tokens)  # needs 2 new blocks, only the hits are free
    bm.free(c)
    assert bm.free_queue() == [3, 4, 1, 0]
    match = bm.match_prefix(again)
    bm.allocate(again, match, again.num_tokens)
    assert again.block_table == [0, 1, 3, 4]
    assert again.num_computed_tokens == 8
    assert bm.free_queue() == []


def test_can_allocate_counts_free_hits_against_free_blocks(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    a = make_sequence("a", range(9), arrival=0)
    admit(bm, a)
    compute_all(bm, a)
    bm.free(a)
    assert bm.free_queue() == [2, 3, 1, 0]
    fits = make_sequence("fits", range(12), arrival=1)  # 3 blocks: 2 hits + 1 new
    assert bm.can_allocate(bm.match_prefix(fits), fits.num_tokens)
    # 5 blocks: 2 hits + 3 new. Four blocks are free, but two of them are the hits.
    too_big = make_sequence("too-big", [*range(8), *range(50, 59)], arrival=2)
    match = bm.match_prefix(too_big)
    assert match.num_free_hits == 2
    assert not bm.can_allocate(match, too_big.num_tokens)


def test_append_slots_adds_a_block_only_at_a_boundary(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = make_sequence("a", range(4), arrival=0)
    admit(bm, seq)
    compute_all(bm, seq)
    seq.append_token(4)
    assert bm.num_new_blocks(seq, 1) == 1
    assert bm.can_append(seq, 1)
    bm.append_slots(seq, 1)
    assert seq.block_table == [0, 1]
    seq.num_computed_tokens += 1
    seq.append_token(5)
    assert bm.num_new_blocks(seq, 1) == 0
    bm.append_slots(seq, 1)
    assert seq.block_table == [0, 1]


def test_can_append_refuses_past_capacity(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=2, block_size=4)
    seq = make_sequence("a", range(8), arrival=0)
    admit(bm, seq)
    compute_all(bm, seq)
    assert not bm.can_append(seq, 1)
    assert bm.num_used_blocks == bm.num_blocks


def test_identical_content_computed_twice_is_cached_once(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(5), arrival=0)
    b = make_sequence("b", range(5), arrival=1)
    admit(bm, a)
    admit(bm, b)  # admitted in the same step: nothing cached yet
    assert (a.block_table, b.block_table) == ([0, 1], [2, 3])
    compute_all(bm, a)
    compute_all(bm, b)
    assert bm.block(0).block_hash is not None
    assert bm.block(2).block_hash is None
    bm.free(b)
    assert bm.free_queue()[:2] == [2, 3]
    assert bm.match_prefix(make_sequence("c", range(5), arrival=2)).block_ids == (0,)


def test_registration_follows_computation_not_allocation(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = make_sequence("a", range(12), arrival=0)
    admit(bm, a)
    assert bm.match_prefix(make_sequence("b", range(12), arrival=1)) == NO_MATCH
    a.num_computed_tokens = 5  # one chunk read
    bm.register_full_blocks(a)
    assert a.num_registered_blocks == 1
    assert bm.match_prefix(make_sequence("c", range(12), arrival=2)).block_ids == (0,)


def test_prefix_caching_disabled_never_matches_or_registers(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a = make_sequence("a", range(9), arrival=0)
    admit(bm, a)
    compute_all(bm, a)
    assert all(bm.block(i).block_hash is None for i in range(8))
    assert bm.match_prefix(make_sequence("b", range(9), arrival=1)) == NO_MATCH


def test_block_hashes_are_computed_once_per_sequence(make_sequence: SeqFactory) -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = make_sequence("a", range(9), arrival=0)
    bm.match_prefix(seq)
    first = list(seq.block_hashes)
    assert len(first) == 2
    bm.match_prefix(seq)
    admit(bm, seq)
    compute_all(bm, seq)
    assert seq.block_hashes == first
