"""Teams, shares, admission and usage: who may run what, and what it cost.

Keys (hashed), the share policy and the Redis leases that enforce it, the fair queue,
capacity from the fleet's state, and usage: the formula (`usage.py`) and its counters.
Imports `fleet_state`, `contracts` and `config`.
"""
