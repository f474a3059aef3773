"""The fleet simulator: the policies we run (scheduler, block manager, routing, shares, bulk
release, autoscaler) driven by a simulated clock and a GPU cost model (docs/simulator.md)."""
