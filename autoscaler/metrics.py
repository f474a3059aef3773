"""The autoscaler's Prometheus metrics, in a registry of its own (served on
`autoscaler.metrics_port`): what it saw, what it decided, and the figures behind each decision.

    switchyard_autoscaler_target_copies{pool}              the target last set
    switchyard_autoscaler_servers{pool,state}              ready / starting / draining seen
    switchyard_autoscaler_signal{pool,signal}              demand_rate (priority + interactive),
                                                           arrival_rate_<class> (each class
                                                           that arrives as a rate, flex included),
                                                           kv_used_fraction, waiting_requests,
                                                           ttft_p99_seconds, bulk_tokens_left
    switchyard_autoscaler_decision_part{pool,part}         the decision's `parts` (the policy's
                                                           interactive need, bulk need, ...)
    switchyard_autoscaler_decisions_total{pool,direction}  up / down / hold
    switchyard_autoscaler_errors_total{pool,stage}         signals / decide / actuate / store

Graph target_copies over servers{state="ready"}: the gap between them is the start-up time the
look-ahead has to cover.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from autoscaler.signals import PoolSignals, ScalingDecision


class AutoscalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.target = Gauge(
            "switchyard_autoscaler_target_copies", "Copies the autoscaler last set.", ["pool"], registry=self.registry
        )
        self.servers = Gauge(
            "switchyard_autoscaler_servers",
            "Servers of the pool by state, as the autoscaler last read them.",
            ["pool", "state"],
            registry=self.registry,
        )
        self.signal = Gauge(
            "switchyard_autoscaler_signal",
            "The pool's signals at the last decision.",
            ["pool", "signal"],
            registry=self.registry,
        )
        self.part = Gauge(
            "switchyard_autoscaler_decision_part",
            "The figures behind the last decision (needs in servers, forecast rates, ...).",
            ["pool", "part"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "switchyard_autoscaler_decisions",
            "Decisions, by whether they raised, lowered or held the target.",
            ["pool", "direction"],
            registry=self.registry,
        )
        self.errors = Counter(
            "switchyard_autoscaler_errors",
            "Passes that failed for a pool, by stage.",
            ["pool", "stage"],
            registry=self.registry,
        )

    def observe(self, signals: PoolSignals, decision: ScalingDecision, previous_target: int | None) -> None:
        pool = signals.pool_id
        self.target.labels(pool).set(decision.target)
        for state, count in (("ready", signals.ready), ("starting", signals.starting), ("draining", signals.draining)):
            self.servers.labels(pool, state).set(count)
        values: dict[str, float] = {
            "demand_rate": signals.demand_rate,
            **{f"arrival_rate_{cls}": rate for cls, rate in signals.arrival_rates.items()},
            "kv_used_fraction": signals.kv_used_fraction,
            "waiting_requests": float(signals.waiting_requests),
            "bulk_tokens_left": float(sum(b.tokens_left for b in signals.bulk)),
        }
        if signals.ttft_p99_s is not None:
            values["ttft_p99_seconds"] = signals.ttft_p99_s
        for name, value in values.items():
            self.signal.labels(pool, name).set(value)
        for part, value in decision.parts.items():
            self.part.labels(pool, part).set(value)
        before = signals.current if previous_target is None else previous_target
        direction = "up" if decision.target > before else "down" if decision.target < before else "hold"
        self.decisions.labels(pool, direction).inc()
