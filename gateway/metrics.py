"""The gateway's Prometheus metrics, in a registry of its own (made by `create_app`), so two
apps in one process (tests, a future multi-app server) never collide on the global one."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Seconds; spans a 10-token reply on an idle server to a long report behind a 30k-token prefill.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# Gaps between streamed deltas: a steady stream sits at tens of ms; stalls show up far right.
_GAP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


class GatewayMetrics:
    """Request counts, latency and time to first token, per model and class."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        labels = ("model", "request_class")
        self.requests = Counter(
            "switchyard_gateway_requests",
            "Generation requests that ended, by how they ended (a finish reason or 'error').",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "switchyard_gateway_requests_in_flight",
            "Generation requests running now.",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            "switchyard_gateway_request_latency_seconds",
            "Time from accepting a generation request to its end.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.time_to_first_token = Histogram(
            "switchyard_gateway_time_to_first_token_seconds",
            "Time from accepting a generation request to its first completion token.",
            labels,
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "switchyard_gateway_tokens",
            "Tokens of finished requests, by kind (prompt, cached, completion).",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.team_requests = Counter(
            "switchyard_gateway_team_requests",
            "Generation requests that ended, per team, model, class and how they ended.",
            ["team", *labels, "outcome"],
            registry=self.registry,
        )
        self.inter_token = Histogram(
            "switchyard_gateway_inter_token_seconds",
            "Time between consecutive streamed deltas of a request, as the gateway received them.",
            labels,
            buckets=_GAP_BUCKETS,
            registry=self.registry,
        )
        self.admission_wait = Histogram(
            "switchyard_gateway_admission_wait_seconds",
            "Time a request spent in admission (the fair queue included), admitted or refused.",
            ["pool", "request_class"],
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.leased_tokens = Gauge(
            "switchyard_gateway_leased_tokens",
            "KV tokens leased in force per pool and team (every gateway's leases), by kind.",
            ["pool", "team", "kind"],
            registry=self.registry,
        )
        self.queued_requests = Gauge(
            "switchyard_gateway_queued_requests",
            "Interactive requests this gateway process holds in a pool's fair queue, per team.",
            ["pool", "team"],
            registry=self.registry,
        )
        self.routed = Counter(
            "switchyard_gateway_routed",
            "Requests sent to a server of the pool, by why the router chose it (router/routing_policy.py).",
            ["pool", "reason"],
            registry=self.registry,
        )
        self.errors = Counter(
            "switchyard_gateway_errors",
            "Error responses, by status and error type.",
            ["status", "type"],
            registry=self.registry,
        )
