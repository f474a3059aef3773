"""The fleet: an autoscaler that looks ahead (plain policy objects, their live actuators) and a
simulator that drives the same objects over a day of the brief's traffic (`fleet/sim/`)."""
