"""A simulated request's lease: what the gateway would lease for it."""

from __future__ import annotations

from simulator.sim_request import BULK, INTERACTIVE, SimRequest


def test_people_lease_all_they_may_hold_and_bulk_its_fraction() -> None:
    person = SimRequest("i1", "chat", INTERACTIVE, 1000, 201, 0.0, bulk_lease_fraction=0.9)
    bulk = SimRequest("b1", "docs", BULK, 1000, 201, 0.0, "batch", bulk_lease_fraction=0.9)
    assert person.lease_tokens == 1201
    assert bulk.lease_tokens == 1081  # 1,080.9 rounded up, as quota.lease_size leases it
    assert SimRequest("b2", "docs", BULK, 1000, 201, 0.0, "batch").lease_tokens == 1201
