"""What each of the four request classes (contracts/service_tier.py) asks of the fleet's size.

    class         role       what the autoscaler does with it
    priority      demand     its arrivals, waiting and TTFT drive scale-up (forecast, load floor)
    interactive   demand     the same: the default tier, today's interactive
    flex          fill       runs on what is already running: never starts a server. Its
                             arrivals, waits and TTFT are left out of every signal that asks
                             for servers; when there is no room it waits a bounded time, then
                             the gateway answers 429 `flex_capacity_unavailable`
    bulk          deadline   sized by its batches' deadlines (`bulk_need.py`) and soaks idle
                             servers (`soak_servers`), as before the tiers

A signal source (the live one, the simulator's) reports arrivals per class; the policies read
`demand_rate` of them, so a flex request can never add a server, whatever its volume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from contracts.service_tier import REQUEST_CLASSES, RequestClass

ScalingRole = Literal["demand", "fill", "deadline"]

SCALING_ROLE: dict[RequestClass, ScalingRole] = {
    "priority": "demand",
    "interactive": "demand",
    "flex": "fill",
    "bulk": "deadline",
}

# The classes whose arrivals, waits and first tokens ask for servers, highest first.
DEMAND_CLASSES: tuple[RequestClass, ...] = tuple(c for c in REQUEST_CLASSES if SCALING_ROLE[c] == "demand")


def demand_rate(arrival_rates: Mapping[RequestClass, float]) -> float:
    """Requests per second of the demand classes: the rate servers are started for."""
    return sum(arrival_rates.get(request_class, 0.0) for request_class in DEMAND_CLASSES)
