"""prompt_block_hashes: chaining, namespaces, full blocks only, the max_blocks cap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from router.block_hashes import DEFAULT_MAX_BLOCKS, prompt_block_hashes

BS = 16


def test_shared_prefix_gives_equal_leading_hashes_and_diverges_after() -> None:
    a = list(range(64))
    b = [*range(40), *range(1000, 1008), *range(48, 64)]  # differs in block 2 only
    ha, hb = prompt_block_hashes(a, BS), prompt_block_hashes(b, BS)
    assert len(ha) == len(hb) == 4
    assert ha[:2] == hb[:2]
    assert ha[2] != hb[2]
    # Block 3 is equal token for token, but its hash covers the blocks before it.
    assert ha[3] != hb[3]


def test_a_change_in_the_first_block_changes_every_hash() -> None:
    a = list(range(48))
    b = [7, *range(1, 48)]
    assert all(x != y for x, y in zip(prompt_block_hashes(a, BS), prompt_block_hashes(b, BS), strict=True))


def test_equal_blocks_at_different_depths_hash_differently() -> None:
    hashes = prompt_block_hashes([5] * 64, BS)
    assert len(set(hashes)) == 4


def test_namespaces_never_share_hashes() -> None:
    tokens = list(range(160))
    by_namespace = [set(prompt_block_hashes(tokens, BS, ns)) for ns in ("", "team-a", "team-b")]
    assert all(len(h) == 10 for h in by_namespace)
    assert not by_namespace[0] & by_namespace[1]
    assert not by_namespace[0] & by_namespace[2]
    assert not by_namespace[1] & by_namespace[2]
    assert prompt_block_hashes(tokens, BS, "team-a") == prompt_block_hashes(tokens, BS, "team-a")


def test_the_partial_last_block_is_not_hashed() -> None:
    assert prompt_block_hashes(list(range(47)), BS) == prompt_block_hashes(list(range(32)), BS)
    assert len(prompt_block_hashes(list(range(48)), BS)) == 3
    assert prompt_block_hashes(list(range(15)), BS) == []
    assert prompt_block_hashes([], BS) == []


def test_max_blocks_hashes_only_the_leading_blocks() -> None:
    tokens = list(range(5 * BS + 3))
    full = prompt_block_hashes(tokens, BS)
    assert len(full) == 5
    assert prompt_block_hashes(tokens, BS, max_blocks=3) == full[:3]
    assert prompt_block_hashes(tokens, BS, max_blocks=0) == []
    assert prompt_block_hashes(tokens, BS, max_blocks=99) == full
    assert len(prompt_block_hashes(list(range(2000 * BS)), BS, max_blocks=DEFAULT_MAX_BLOCKS)) == 1024


def test_any_sequence_of_ints_hashes_alike() -> None:
    tokens = list(range(100))
    expected = prompt_block_hashes(tokens, BS, "t")
    assert prompt_block_hashes(tuple(tokens), BS, "t") == expected
    assert prompt_block_hashes(np.arange(100, dtype=np.int64), BS, "t") == expected


def test_hashes_are_the_same_in_another_process() -> None:
    """str hashing is randomised per process; the namespace seed must not depend on it."""
    code = "from router.block_hashes import prompt_block_hashes as h; print(h(list(range(64)), 16, 'team-a'))"
    root = Path(__file__).resolve().parents[2]
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {str(prompt_block_hashes(list(range(64)), 16, "team-a"))}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="block_size"):
        prompt_block_hashes([1, 2, 3], 0)
    with pytest.raises(ValueError, match="max_blocks"):
        prompt_block_hashes([1, 2, 3], 1, max_blocks=-1)
