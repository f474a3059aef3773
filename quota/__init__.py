"""Teams, shares, admission and usage: who may run what, and what it cost.

Keys (hashed), the share policy and the Redis leases that enforce it, the fair queue,
capacity from the fleet's state, and usage: the record and its Redis meter (`usage.py`), the
formula that prices a request (`usage_formula.py`) and its Prometheus counters (`usage_counters.py`).
Imports `fleet_state`, `contracts` and `config`.
"""
