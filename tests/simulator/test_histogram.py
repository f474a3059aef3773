"""Log-bucket histograms: a value's bucket does not depend on what was added before it."""

from __future__ import annotations

from simulator.histogram import Histogram


def test_runs_of_equal_values_land_where_each_lands_alone() -> None:
    """`add` keeps the last value's bucket for the next equal one (a step's replies share
    their gap): a run broken by other values must not reuse a stale bucket."""
    values = [0.033, 0.033, 0.033, 1.5, 0.033, 2e-5, 2e-5, 0.5, 0.033, 0.0]
    together = Histogram()
    for value in values:
        together.add(value)
    apart = Histogram()
    for value in values:
        one = Histogram()
        one.add(value)
        apart.merge(one)
    assert together.counts == apart.counts
    assert together.total == len(values) and together.max_value == 1.5
    assert together.percentile(0.5) == apart.percentile(0.5)
