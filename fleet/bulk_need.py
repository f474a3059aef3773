"""How many servers a pool's bulk backlog needs so every batch meets its deadline, and how many
idle servers the backlog can keep busy.

Bulk only uses what interactive traffic leaves. Interactive load is counted in server-equivalents
of a full server, `L = rate × avg_request_s / requests` (Little's law), and is taken to hold over
the whole window: the autoscaler recomputes every interval, so a window that is too pessimistic
by day corrects itself as the deadline nears.

Deadlines, earliest first (EDF): the tokens due by each deadline d are all the batches with a
deadline ≤ d, and a fleet of N servers must compute them in T = d − now seconds. Ready servers
serve the whole T; any server not yet ready (starting, or to be started now) only T − startup_s.
In server-seconds, with W = tokens due by d / tokens_per_s:

    W + L·T ≤ N·T                          if that fits in the ready servers: N = L + W / T
    W + L·T ≤ ready·T + (N − ready)·(T − S) otherwise:  N = ready + (W + L·T − ready·T) / (T − S)

and the bulk need is the largest N over the deadlines. When T ≤ S and the ready servers cannot do
it, no server started now helps: that deadline is infeasible (the caller runs the most it may).
Batches already past their deadline are left out: their entries are expiring.

    time ─▶ now ──── S ────┬───────────── T ─────────────▶ d
    ready servers   ███████████████████████████████████████  (minus interactive L)
    started now             ███████████████████████████████
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fleet.signals import BulkDemand, ServerCapacity


@dataclass(frozen=True, slots=True)
class BulkNeed:
    """The fleet the backlog's deadlines need, with the deadline that binds."""

    servers: float  # total servers (interactive load included) for the binding deadline; 0: no backlog
    tokens_due: int  # tokens due by the binding deadline (cumulative, EDF)
    due_in_s: float  # seconds from now to the binding deadline
    feasible: bool  # False: some deadline falls before a new server could help
    tokens_left: int  # all tokens of the batches still before their deadline
    overdue_tokens: int  # tokens of batches whose deadline has passed (not counted)


def interactive_load(rate: float, capacity: ServerCapacity) -> float:
    """Server-equivalents of a full server that `rate` interactive req/s keep busy (Little's law:
    concurrent replies = rate × how long each holds its seat)."""
    return rate * capacity.avg_request_s / capacity.requests


def bulk_need(
    batches: Sequence[BulkDemand], *, now: float, ready: int, load: float, capacity: ServerCapacity, startup_s: float
) -> BulkNeed:
    """The fewest servers that meet every deadline beside interactive load `load` (see module)."""
    cumulative = 0
    overdue = 0
    binding = (0.0, 0, 0.0)  # servers, tokens due, seconds left; the first infinite one stays
    for batch in sorted(batches, key=lambda b: b.deadline):
        window_s = batch.deadline - now
        if window_s <= 0:
            overdue += batch.tokens_left
            continue
        cumulative += batch.tokens_left
        busy_s = cumulative / capacity.tokens_per_s + load * window_s  # server-seconds due by d
        if busy_s <= ready * window_s:
            servers = busy_s / window_s
        elif window_s > startup_s:
            servers = ready + (busy_s - ready * window_s) / (window_s - startup_s)
        else:
            servers = math.inf
        if servers > binding[0]:
            binding = (servers, cumulative, window_s)
    servers, tokens_due, due_in_s = binding
    return BulkNeed(servers, tokens_due, due_in_s, math.isfinite(servers), cumulative, overdue)


def soak_servers(tokens_left: int, *, load: float, capacity: ServerCapacity, window_s: float) -> float:
    """Servers the backlog can keep busy for `window_s` beside interactive load `load`.

    The autoscaler keeps (never adds) up to this many when interactive demand falls: a server the
    backlog can fill for a start-up time is worth more running than drained and started again
    for the next ramp, and once the backlog cannot fill it, it goes."""
    if tokens_left <= 0:
        return 0.0
    return load + tokens_left / (capacity.tokens_per_s * window_s)
