"""What a bulk request leases: a fraction of prompt + max_tokens, as written, rounded up."""

from __future__ import annotations

import pytest

from quota.lease_size import bulk_lease_tokens


def test_the_whole_lease_at_one() -> None:
    assert bulk_lease_tokens(1234, 1.0) == 1234


def test_a_fraction_is_taken_as_written_and_rounded_up() -> None:
    assert bulk_lease_tokens(1000, 0.9) == 900  # 0.9 as a double is a hair above nine tenths
    assert bulk_lease_tokens(1001, 0.9) == 901  # 900.9
    assert bulk_lease_tokens(3, 0.1) == 1
    assert bulk_lease_tokens(1, 0.01) == 1  # never nothing


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.01])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        bulk_lease_tokens(100, fraction)


def test_an_empty_request_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        bulk_lease_tokens(0, 0.9)
