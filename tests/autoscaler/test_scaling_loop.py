"""The autoscaler's loop with a scripted policy, scripted signals and a recording actuator, and
a real Redis for what it stores: targets for `switchyard servers`, the rate history, taught rates."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from prometheus_client import generate_latest

from autoscaler.load_profile import LoadProfile
from autoscaler.rate_history import RateHistory
from autoscaler.scaling_loop import AutoscalerService, PoolScaler
from autoscaler.signals import PoolSignals, ScalingDecision
from fleet_state.pool_targets import PoolTargetStore


def signals(pool_id: str, now: float, ready: int = 1, rate: float = 2.0, starting: int = 0) -> PoolSignals:
    return PoolSignals(pool_id, now, ready, starting, 0, {"interactive": rate}, 0.5, 0, 0.2)


class ScriptedPolicy:
    """Answers the targets it was given, in order, and keeps what it saw."""

    def __init__(self, targets: list[int]) -> None:
        self._targets: Iterator[int] = iter(targets)
        self.seen: list[PoolSignals] = []

    def decide(self, s: PoolSignals) -> ScalingDecision:
        self.seen.append(s)
        target = next(self._targets)
        return ScalingDecision(s.pool_id, target, s.current, (f"scripted {target}",), {"need": float(target)})


class FailingPolicy:
    def decide(self, s: PoolSignals) -> ScalingDecision:
        raise RuntimeError("policy bug")


class ScriptedSignals:
    def __init__(self, pools: list[str], rate: float = 2.0) -> None:
        self.pools = pools
        self.rate = rate

    async def read(self, now: float) -> dict[str, PoolSignals]:
        return {pool: signals(pool, now, rate=self.rate) for pool in self.pools}


class RecordingActuator:
    name = "recording"

    def __init__(self, requested: int | None = None) -> None:
        self.applied: list[tuple[str, int]] = []
        self._requested = requested

    async def apply(self, pool_id: str, copies: int) -> None:
        self.applied.append((pool_id, copies))

    async def requested(self, pool_id: str) -> int | None:
        return self._requested


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_each_pass_decides_applies_and_stores_the_target_with_its_reasons(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    policy = ScriptedPolicy([3, 2])
    actuator = RecordingActuator()
    clock = Clock()
    history = RateHistory(client)
    service = AutoscalerService(
        {"a": PoolScaler(policy)}, ScriptedSignals(["a"]), actuator,
        interval_s=1.0, targets=PoolTargetStore(client), history=history, clock=clock,
    )  # fmt: skip
    decisions = await service.step()
    clock.now += 1
    await service.step()
    assert decisions["a"].target == 3
    assert actuator.applied == [("a", 3), ("a", 2)]
    stored = (await PoolTargetStore(client).read(["a", "b"]))["a"]
    assert (stored.target, stored.ready, stored.reasons, stored.actuator) == (2, 1, ("scripted 2",), "recording")
    assert await history.load("a", clock.now) == [(1_000_000.0, 2.0), (1_000_001.0, 2.0)]
    text = generate_latest(service.metrics.registry).decode()
    assert 'switchyard_autoscaler_target_copies{pool="a"} 2.0' in text
    assert 'switchyard_autoscaler_decision_part{part="need",pool="a"} 2.0' in text
    assert 'switchyard_autoscaler_decisions_total{direction="up",pool="a"} 1.0' in text
    assert 'switchyard_autoscaler_decisions_total{direction="down",pool="a"} 1.0' in text
    await client.aclose()


async def test_copies_asked_for_but_not_registered_count_as_starting() -> None:
    policy = ScriptedPolicy([3])
    service = AutoscalerService(
        {"a": PoolScaler(policy)}, ScriptedSignals(["a"]), RecordingActuator(requested=3), interval_s=1.0
    )
    await service.step()
    assert (policy.seen[0].ready, policy.seen[0].starting) == (1, 2)


async def test_one_pools_failure_leaves_the_others_alone() -> None:
    actuator = RecordingActuator()
    service = AutoscalerService(
        {"bad": PoolScaler(FailingPolicy()), "good": PoolScaler(ScriptedPolicy([2]))},
        ScriptedSignals(["bad", "good"]),
        actuator,
        interval_s=1.0,
    )
    decisions = await service.step()
    assert list(decisions) == ["good"] and actuator.applied == [("good", 2)]
    text = generate_latest(service.metrics.registry).decode()
    assert 'switchyard_autoscaler_errors_total{pool="bad",stage="decide"} 1.0' in text


async def test_taught_rates_reach_the_profile_and_the_history(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    history = RateHistory(client)
    profile = LoadProfile(bin_s=60.0)
    clock = Clock(10 * 86_400.0)
    yesterday = clock.now - 86_400
    assert await history.teach("a", [(yesterday + 30, 5.0), (yesterday + 90, 7.0)]) == 2
    service = AutoscalerService(
        {"a": PoolScaler(ScriptedPolicy([1]), profile)}, ScriptedSignals(["a"]), RecordingActuator(),
        interval_s=1.0, history=history, clock=clock,
    )  # fmt: skip
    await service.step()
    assert profile.expected(clock.now + 30) == pytest.approx(5.0)  # yesterday's slot, same time of day
    assert await history.take_taught("a") == []  # taken once
    assert (yesterday + 90, 7.0) in await history.load("a", clock.now)
    await client.aclose()


async def test_targets_expire_when_the_autoscaler_stops_writing(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    service = AutoscalerService(
        {"a": PoolScaler(ScriptedPolicy([2]))}, ScriptedSignals(["a"]), RecordingActuator(),
        interval_s=1.0, targets=PoolTargetStore(client, ttl_s=30.0),
    )  # fmt: skip
    await service.step()
    assert 0 < await client.pttl("sy:pool:a:target") <= 30_000
    await client.aclose()
