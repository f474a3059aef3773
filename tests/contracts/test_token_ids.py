"""PackedTokenIds: a prompt's ids held as the INT32 bytes `llm`'s `input_ids` carries."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.token_ids import PackedTokenIds


def test_ids_pack_into_four_bytes_each_and_read_back_unchanged() -> None:
    ids = [0, 1, 2**31 - 1, -(2**31), 128_000]
    packed = PackedTokenIds.pack(ids)
    assert len(packed) == 5 and len(packed.packed) == 20
    assert packed.tolist() == ids
    assert packed.array().dtype == np.int32 and packed.array().tolist() == ids
    assert packed == PackedTokenIds.pack(tuple(ids)) and hash(packed) == hash(PackedTokenIds.pack(ids))
    assert repr(packed) == f"PackedTokenIds.pack({ids})"


def test_no_ids_is_empty_and_false() -> None:
    assert not PackedTokenIds() and len(PackedTokenIds()) == 0
    assert PackedTokenIds.pack([]) == PackedTokenIds()


def test_the_array_is_a_read_only_view() -> None:
    array = PackedTokenIds.pack([5, 6]).array()
    with pytest.raises(ValueError, match="read-only"):
        array[0] = 7


@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1, 2**64])
def test_an_id_int32_cannot_hold_is_refused_not_wrapped(bad: int) -> None:
    with pytest.raises(ValueError, match=f"token id {bad} does not fit INT32"):
        PackedTokenIds.pack([1, bad, 2])
