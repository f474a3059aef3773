"""What the autoscaler sees of one pool, and what it answers: the seam between the policy (plain
objects, `autoscaler/policies.py`) and whoever feeds it — the live service (`autoscaler/scaling_loop.py`,
reading Redis and the servers' metrics) or the simulator (`simulator/`, a simulated clock).

    PoolSignals ──▶ ScalingPolicy.decide() ──▶ ScalingDecision (target copies, reasons)

Times are seconds on the caller's clock (Unix time live, simulated time in the simulator); the
policy never reads a clock of its own. Arrivals come per request class; only the demand classes
(priority, interactive) ask for servers (`autoscaler/demand_classes.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.demand_classes import demand_rate
from contracts.service_tier import RequestClass


@dataclass(frozen=True, slots=True)
class BulkDemand:
    """One batch's remaining work in a pool: tokens still to compute (prompt + reply) by when."""

    tokens_left: int
    deadline: float


@dataclass(frozen=True, slots=True)
class ServerCapacity:
    """What one server (one model copy) of the pool can carry, from the plan or measured.

    The brief's GPU: ~35 replies at once (80,000 KV tokens / 2,300 per request), each written at
    ~30 tokens/s, so ~1,050 generated tokens/s, and an interactive request lasts ~10 s."""

    requests: float  # replies one server holds at once at the average lengths
    tokens_per_s: float  # tokens (prompt + reply) one full server computes per second
    avg_request_s: float  # how long an average interactive request holds its seat
    startup_s: float  # from "start one" to "serving": the brief's eight minutes


@dataclass(frozen=True, slots=True)
class PoolSignals:
    """One pool's state at `now`, as the autoscaler needs it.

    `arrival_rates` holds every class that arrives as a rate (a class absent: none arrived);
    `waiting_requests` and `ttft_p99_s` are the demand classes' where the source can tell the
    classes apart (flex waits for room by design: it must not ask for servers)."""

    pool_id: str
    now: float
    ready: int  # servers serving
    starting: int  # launched, not ready yet
    draining: int  # finishing their replies; not counted as capacity
    arrival_rates: Mapping[RequestClass, float]  # requests per second arriving, per class (recent window)
    kv_used_fraction: float  # KV in use across ready servers, flex's left out (it fills what runs) (0..1)
    waiting_requests: int  # queued for room (at the gateway or in the engines), not yet admitted
    ttft_p99_s: float | None  # recent time to first token of the demand classes, p99 (None: no sample)
    bulk: tuple[BulkDemand, ...] = ()  # the pool's batches with work left

    @property
    def current(self) -> int:
        """Copies that are or will be serving: ready plus starting."""
        return self.ready + self.starting

    @property
    def demand_rate(self) -> float:
        """Requests per second of the classes servers are started for (priority + interactive)."""
        return demand_rate(self.arrival_rates)


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """The copies a pool should run, and why (logged and exported by the caller)."""

    pool_id: str
    target: int
    current: int
    reasons: tuple[str, ...]
    # The figures behind the target (interactive need at the forecast, bulk need, headroom, ...).
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def change(self) -> int:
        return self.target - self.current


class ScalingPolicy(Protocol):
    """An autoscaler: the look-ahead one (`Autoscaler`) or a baseline the simulator compares."""

    def decide(self, signals: PoolSignals) -> ScalingDecision: ...
