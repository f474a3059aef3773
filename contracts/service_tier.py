"""Levels of service: four tiers, highest first, and the one rule of each (docs/tiers.md).

    tier (OpenAI's `service_tier`)   class (`/v1/generate`'s `class`, the servers' `request_class`)
    priority                         priority      ahead of every lower tier; preempts flex and bulk
    default                          interactive   today's interactive; preempts flex and bulk
    flex                             flex          only on room the higher tiers leave; preempted
                                                   first among interactive-shaped work; a bounded
                                                   wait, then 429 `flex_capacity_unavailable`
    batch                            bulk          deadline-driven bulk; preempted by every tier

The class names are what crosses the wire to the servers (the two old values unchanged); the
tier names are OpenAI's, on the OpenAI routes and in usage. One mapping, here.
"""

from __future__ import annotations

from typing import get_args

from config.settings import TIER_OF_CLASS_NAME
from config.tier_names import RequestClass as RequestClass
from config.tier_names import ServiceTier as ServiceTier

# Highest first: the order every scheduler (admission's queue, the engine's) serves them in.
REQUEST_CLASSES: tuple[RequestClass, ...] = get_args(RequestClass)
SERVICE_TIERS: tuple[ServiceTier, ...] = get_args(ServiceTier)

CLASS_OF_TIER: dict[ServiceTier, RequestClass] = dict(zip(SERVICE_TIERS, REQUEST_CLASSES, strict=True))
TIER_OF_CLASS: dict[RequestClass, ServiceTier] = TIER_OF_CLASS_NAME
# 0 is served first.
CLASS_RANK: dict[RequestClass, int] = {request_class: rank for rank, request_class in enumerate(REQUEST_CLASSES)}

# Which running classes a waiting request of a class may take memory from (their KV freed,
# resumed token for token later): never its own class or a higher one, and `priority` never
# takes from `interactive` (people waiting on the default tier keep their replies).
PREEMPTS: dict[RequestClass, frozenset[RequestClass]] = {
    "priority": frozenset({"flex", "bulk"}),
    "interactive": frozenset({"flex", "bulk"}),
    "flex": frozenset({"bulk"}),
    "bulk": frozenset(),
}

# Shaped like a person's request (a reply streamed now, admitted or refused at once): every
# class but bulk, which the dispatcher paces against its deadline.
INTERACTIVE_SHAPED: frozenset[RequestClass] = frozenset({"priority", "interactive", "flex"})

# The error code of a flex request refused for want of idle room (OpenAI answers flex the same way).
FLEX_CAPACITY_UNAVAILABLE = "flex_capacity_unavailable"


def tier_of(request_class: str) -> str:
    """The tier of a class as usage records name it (a record written under another name keeps it)."""
    for known, tier in TIER_OF_CLASS.items():
        if request_class == known:
            return tier
    return request_class
