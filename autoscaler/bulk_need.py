"""How many servers a pool's bulk backlog needs so every batch meets its deadline, and how many
idle servers the backlog can keep busy.

Bulk only uses what interactive traffic leaves. Interactive load is counted in server-equivalents
of a full server, `L = rate × avg_request_s / requests` (Little's law), and comes as a curve over
the window ahead (`LoadCurve`: the forecast sampled every step, so the morning ramp an overnight
backlog must finish before is in it; a flat curve is the current load held).

Deadlines, earliest first (EDF): the tokens due by each deadline d are all the batches with a
deadline ≤ d, W of them in server-seconds (tokens / tokens_per_s), and N servers must compute
them in T = d − now beside the curve. Ready servers serve from now; any server not yet ready
(starting, or started now) only after startup_s = S. What N servers leave for bulk:

    room(N) = Σ over the samples k before d of
                  early_k × max(0, min(N, ready) − L_k) + late_k × max(0, N − L_k)
              (early_k, late_k: the sample's time before and after S)

room grows with N; the bulk need for d is the least N with room(N) ≥ W (bisection), and the need
is the largest over the deadlines. When even every server could not do it (the deadline falls
before a new server helps and the ready ones cannot), the deadline is infeasible (the caller runs
the most it may). Batches already past their deadline are left out: their entries are expiring.

    time ─▶ now ──── S ────┬───────────── T ─────────────▶ d
    ready servers   ███████████████████████████████████████  (minus interactive L(t))
    started now             ███████████████████████████████
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autoscaler.signals import BulkDemand, ServerCapacity

_BISECTION_STEPS = 40
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class BulkNeed:
    """The fleet the backlog's deadlines need, with the deadline that binds."""

    servers: float  # total servers (interactive load included) for the binding deadline; 0: no backlog
    tokens_due: int  # tokens due by the binding deadline (cumulative, EDF)
    due_in_s: float  # seconds from now to the binding deadline
    feasible: bool  # False: some deadline falls before a new server could help
    tokens_left: int  # all tokens of the batches still before their deadline
    overdue_tokens: int  # tokens of batches whose deadline has passed (not counted)


@dataclass(frozen=True, slots=True)
class LoadCurve:
    """Interactive load ahead, in server-equivalents: `loads[k]` from now + k × step_s for one
    step; past the last sample the last value holds."""

    step_s: float
    loads: tuple[float, ...]

    @classmethod
    def flat(cls, load: float) -> LoadCurve:
        return cls(step_s=math.inf, loads=(load,))

    def samples(self, window_s: float) -> tuple[Floats, Floats, Floats]:
        """(offsets, durations, loads) of the samples that fall within [0, window_s)."""
        if math.isinf(self.step_s):
            return np.zeros(1), np.array([window_s]), np.array(self.loads[:1])
        count = max(1, math.ceil(window_s / self.step_s))
        offsets = np.arange(count) * self.step_s
        durations = np.minimum(self.step_s, window_s - offsets)
        loads = np.array([self.loads[min(k, len(self.loads) - 1)] for k in range(count)])
        return offsets, durations, loads


def interactive_load(rate: float, capacity: ServerCapacity) -> float:
    """Server-equivalents of a full server that `rate` interactive req/s keep busy (Little's law:
    concurrent replies = rate × how long each holds its seat)."""
    return rate * capacity.avg_request_s / capacity.requests


def bulk_need(
    batches: Sequence[BulkDemand],
    *,
    now: float,
    ready: int,
    curve: LoadCurve,
    capacity: ServerCapacity,
    startup_s: float,
) -> BulkNeed:
    """The fewest servers that meet every deadline beside the interactive `curve` (see module)."""
    cumulative = 0
    overdue = 0
    binding = (0.0, 0, 0.0)  # servers, tokens due, seconds left; the first infinite one stays
    for batch in sorted(batches, key=lambda b: b.deadline):
        window_s = batch.deadline - now
        if window_s <= 0:
            overdue += batch.tokens_left
            continue
        cumulative += batch.tokens_left
        # Server-seconds of bulk due by d, less float dust (sums of durations are not exact).
        due_s = cumulative / capacity.tokens_per_s * (1 - 1e-9)
        offsets, durations, loads = curve.samples(window_s)
        # Each sample's time before S (only ready servers) and after it (every server).
        early = np.clip(startup_s - offsets, 0.0, durations)
        late = durations - early

        def room(servers: float, early: Floats = early, late: Floats = late, loads: Floats = loads) -> float:
            ready_room = early * np.maximum(0.0, min(servers, ready) - loads)
            return float(np.sum(ready_room + late * np.maximum(0.0, servers - loads)))

        if room(binding[0]) >= due_s:
            continue  # what an earlier deadline needs already does this one
        late_s = float(np.sum(late))
        if late_s <= 0 and room(ready) < due_s:
            servers = math.inf
        else:
            low, high = 0.0, ready + float(loads.max()) + due_s / max(late_s, 1e-9) + 1.0
            for _ in range(_BISECTION_STEPS):
                middle = (low + high) / 2
                low, high = (low, middle) if room(middle) >= due_s else (middle, high)
            servers = high
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
