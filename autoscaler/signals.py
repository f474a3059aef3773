"""What the autoscaler sees of one pool, and what it answers: the seam between the policy (plain
objects, `autoscaler/policies.py`) and whoever feeds it — the live service (`autoscaler/scaling_loop.py`,
reading Redis and the servers' metrics) or the simulator (`simulator/`, a simulated clock).

    PoolSignals ──▶ ScalingPolicy.decide() ──▶ ScalingDecision (target copies, reasons)

Times are seconds on the caller's clock (Unix time live, simulated time in the simulator); the
policy never reads a clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


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
    """One pool's state at `now`, as the autoscaler needs it."""

    pool_id: str
    now: float
    ready: int  # servers serving
    starting: int  # launched, not ready yet
    draining: int  # finishing their replies; not counted as capacity
    interactive_rate: float  # interactive requests per second arriving (recent window)
    kv_used_fraction: float  # KV in use across ready servers (0..1)
    waiting_requests: int  # queued in the engines, not yet admitted
    ttft_p99_s: float | None  # recent interactive time to first token, p99 (None: no sample)
    bulk: tuple[BulkDemand, ...] = ()  # the pool's batches with work left

    @property
    def current(self) -> int:
        """Copies that are or will be serving: ready plus starting."""
        return self.ready + self.starting


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
