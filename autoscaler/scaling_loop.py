"""The autoscaler's loop: the I/O around the policy objects, once every `interval_s`.

    per pool:  signals (autoscaler/live_signals.py)
               ─▶ taught rates into the profile (autoscaler/rate_history.py)
               ─▶ policy.decide(signals) ─▶ ScalingDecision (target, reasons, parts)
               ─▶ log it (INFO when the target or its reasons change)
               ─▶ actuator.apply(pool, target)      supervisor or Kubernetes
               ─▶ metrics, `sy:pool:{pool}:target` for `switchyard servers`, the rate history

The policy records each pass's rate into its own profile (`Autoscaler.decide`); this loop only
adds what was taught. Every pass applies the target again, even unchanged: an actuator that
lost it (a supervisor restarted, a Deployment edited by hand) is set right within an interval.
One pool's failure (its signals, its actuator) is logged and counted, and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from autoscaler.actuators import Actuator
from autoscaler.load_profile import LoadProfile
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.rate_history import RateHistory
from autoscaler.signals import PoolSignals, ScalingDecision, ScalingPolicy
from fleet_state.pool_targets import PoolTarget, PoolTargetStore

logger = logging.getLogger(__name__)


class SignalSource(Protocol):
    async def read(self, now: float) -> dict[str, PoolSignals]: ...


@dataclass(slots=True)
class PoolScaler:
    """One pool's policy, and the profile it forecasts from (where taught rates go)."""

    policy: ScalingPolicy
    profile: LoadProfile | None = None


class AutoscalerService:
    def __init__(
        self,
        scalers: Mapping[str, PoolScaler],
        signals: SignalSource,
        actuator: Actuator,
        *,
        interval_s: float,
        targets: PoolTargetStore | None = None,
        history: RateHistory | None = None,
        metrics: AutoscalerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._scalers = dict(scalers)
        self._signals = signals
        self._actuator = actuator
        self._interval_s = interval_s
        self._targets = targets
        self._history = history
        self.metrics = metrics if metrics is not None else AutoscalerMetrics()
        self._clock = clock
        self._last: dict[str, ScalingDecision] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every `interval_s` until `stop` is set."""
        while not stop.is_set():
            began = time.monotonic()
            await self.step()
            wait = max(0.0, self._interval_s - (time.monotonic() - began))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def step(self) -> dict[str, ScalingDecision]:
        """One pass over every pool; the decisions made (a failed pool has none)."""
        now = self._clock()
        try:
            signals = await self._signals.read(now)
        except Exception:
            logger.exception("autoscaler: cannot read the pools' signals")
            for pool_id in self._scalers:
                self.metrics.errors.labels(pool_id, "signals").inc()
            return {}
        decisions: dict[str, ScalingDecision] = {}
        for pool_id, scaler in self._scalers.items():
            if pool_id not in signals:
                self.metrics.errors.labels(pool_id, "signals").inc()
                continue
            stage = "decide"
            try:
                decision = await self._decide(pool_id, scaler, signals[pool_id], now)
                stage = "actuate"
                await self._actuator.apply(pool_id, decision.target)
                stage = "store"
                await self._record(signals[pool_id], decision, now)
            except Exception:
                logger.exception("autoscaler: pool %s failed at %s", pool_id, stage)
                self.metrics.errors.labels(pool_id, stage).inc()
                continue
            decisions[pool_id] = decision
        return decisions

    async def _decide(self, pool_id: str, scaler: PoolScaler, signals: PoolSignals, now: float) -> ScalingDecision:
        if self._history is not None and scaler.profile is not None:
            taught = await self._history.take_taught(pool_id)
            for t, rate in taught:
                scaler.profile.record(t, rate)
            if taught:
                await self._history.append(pool_id, taught, now)
                logger.info("pool %s: learnt %d taught rates", pool_id, len(taught))
        requested = await self._actuator.requested(pool_id)
        if requested is not None and requested > signals.current:  # asked for, not registered yet
            signals = replace(signals, starting=signals.starting + requested - signals.current)
        decision = scaler.policy.decide(signals)
        previous = self._last.get(pool_id)
        self.metrics.observe(signals, decision, None if previous is None else previous.target)
        changed = previous is None or previous.target != decision.target or previous.reasons != decision.reasons
        logger.log(
            logging.INFO if changed else logging.DEBUG,
            "pool %s: target %d (ready %d, starting %d, draining %d, %.2f req/s of demand): %s",
            pool_id,
            decision.target,
            signals.ready,
            signals.starting,
            signals.draining,
            signals.demand_rate,
            "; ".join(decision.reasons) or "no change",
        )
        self._last[pool_id] = decision
        return decision

    async def _record(self, signals: PoolSignals, decision: ScalingDecision, now: float) -> None:
        pool_id = signals.pool_id
        if self._targets is not None:
            await self._targets.write(
                PoolTarget(
                    pool_id, decision.target, signals.ready, signals.starting, signals.draining,
                    decision.reasons, now, self._actuator.name,
                )
            )  # fmt: skip
        if self._history is not None:
            await self._history.append(pool_id, [(now, signals.demand_rate)], now)
