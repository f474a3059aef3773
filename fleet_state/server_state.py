"""A server's place in its life, as the registry records it and every reader of the fleet sees it."""

from __future__ import annotations

import enum


class ServerState(str, enum.Enum):
    """A server's place in its life: only READY servers take new work."""

    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"  # finishes what it has, takes nothing new
    DEAD = "dead"
