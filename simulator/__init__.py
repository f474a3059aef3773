"""The fleet simulator: the policies we run (scheduler, block manager, routing, shares, bulk
release, autoscaler) driven by a simulated clock and a GPU cost model (docs/simulator.md).

Exact mode steps every server's real scheduler; fluid mode steps a pool's aggregate. Plots need
the `sim` extra (matplotlib). Imports the policies from `engine`, `router`, `quota`, `bulk` and
`autoscaler`; nothing live imports it.
"""
