"""The reactive floor: what the pool's current load says it needs whatever the forecast says, so
a forecast that is wrong (a flash crowd, a holiday that isn't) is corrected within one interval.

Each sign of pressure asks for at least one server more than are ready; the floor is the largest:

    TTFT p99 over target,     ready + 1                      (no measure of how far off)
      with requests waiting or KV over target
    requests waiting          ready + ⌈waiting / seats⌉      (seats = requests × target KV)
    KV use over target        max(ready + 1, ⌈ready × used / target⌉)

A slow first token that neither a queue nor a full KV cache explains is a long prompt being read
(a 30,000-token document takes seconds on any server): more servers would not make it faster, and
counting it would add a server every start-up all night (the simulator showed exactly that). So
time to first token asks for a server only beside one of those signs.

Servers already starting count toward the floor (the caller compares it with ready + starting),
so one slow minute does not launch a server every interval while the first one starts.

KV use counts only when the pool has no bulk backlog: bulk soaks the room people leave and is
preempted first, so a full KV cache beside a backlog is the design working, not a shortage.
Waiting requests and time to first token are the signs people feel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.signals import PoolSignals, ServerCapacity


@dataclass(frozen=True, slots=True)
class LoadFloor:
    """The servers current load asks for (0: no pressure) and the signs that asked."""

    servers: int
    reasons: tuple[str, ...]


def load_floor(
    signals: PoolSignals, *, capacity: ServerCapacity, target_kv_fraction: float, ttft_target_s: float
) -> LoadFloor:
    """The floor current load sets on the pool's copies (see the module docstring)."""
    ready = signals.ready
    asks: list[tuple[int, str]] = []
    used = signals.kv_used_fraction
    ttft = signals.ttft_p99_s
    pressed = signals.waiting_requests > 0 or used > target_kv_fraction
    if ttft is not None and ttft > ttft_target_s and pressed:
        asks.append((ready + 1, f"TTFT p99 {ttft:.2f} s over {ttft_target_s:.2f} s: one more than {ready} ready"))
    if signals.waiting_requests > 0:
        seats = capacity.requests * target_kv_fraction
        servers = ready + math.ceil(signals.waiting_requests / seats)
        asks.append((servers, f"{signals.waiting_requests} requests waiting: {servers} servers"))
    if used > target_kv_fraction and not signals.bulk:
        servers = max(ready + 1, math.ceil(ready * used / target_kv_fraction - 1e-9))
        asks.append((servers, f"KV use {used:.0%} over {target_kv_fraction:.0%} on {ready} ready: {servers} servers"))
    if not asks:
        return LoadFloor(0, ())
    return LoadFloor(max(servers for servers, _ in asks), tuple(reason for _, reason in asks))
