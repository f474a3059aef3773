"""The gateway's Prometheus metrics, in a registry of its own (made by `create_app`), so two
apps in one process (tests, a future multi-app server) never collide on the global one.

With several worker processes (`multiprocess_dir` given, serving/metrics_registry.py) the
values live in each worker's files and a scrape reads every worker's: counters and histograms
sum over workers, the two gauges kept here are `livesum` (summed over the workers alive now),
and the leases gauge, the same in every worker, is made per scrape (`leased_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from quota.shares import TeamLoad
from serving.metrics_registry import check_multiprocess_values, worker_metrics

# Seconds; spans a 10-token reply on an idle server to a long report behind a 30k-token prefill.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# Gaps between streamed deltas: a steady stream sits at tens of ms; stalls show up far right.
_GAP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


class GatewayMetrics:
    """Request counts, latency and time to first token, per model and class.

    `multiprocess_dir`: the folder every worker of this gateway writes its metrics to (the
    process must have been started with `PROMETHEUS_MULTIPROC_DIR` set to it); None: this
    process alone, read from `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None, multiprocess_dir: Path | None = None) -> None:
        if multiprocess_dir is not None:
            check_multiprocess_values(multiprocess_dir)
        self.multiprocess_dir = multiprocess_dir
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._queued_labels: set[tuple[str, str]] = set()
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
            multiprocess_mode="livesum",
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
        # Leases in force are Redis's, the same whichever worker reads them: a scrape builds that
        # gauge for itself (`leased_tokens`) rather than sum it over workers.
        self.queued_requests = Gauge(
            "switchyard_gateway_queued_requests",
            "Interactive requests this gateway holds in a pool's fair queue, per team.",
            ["pool", "team"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.routed = Counter(
            "switchyard_gateway_routed",
            "Requests sent to a server of the pool, by why the router chose it (router/routing_policy.py).",
            ["pool", "reason"],
            registry=self.registry,
        )
        self.slo_unmeetable = Counter(
            "switchyard_gateway_slo_unmeetable",
            "Requests whose x-slo-ttft-ms no server could meet when they arrived, by tier: priority "
            "ones ran anyway (a miss), flex ones were refused (429).",
            ["service_tier"],
            registry=self.registry,
        )
        self.errors = Counter(
            "switchyard_gateway_errors",
            "Error responses, by status and error type.",
            ["status", "type"],
            registry=self.registry,
        )

    def observe_queues(self, queued: Mapping[str, Mapping[str, int]]) -> None:
        """Set the fair-queue gauge to this process's lengths, per pool then team. A pair seen
        before and absent now reads 0: in multiprocess mode a label set, once written, stays in
        the worker's file, so it must be zeroed rather than removed."""
        now = {(pool_id, team): count for pool_id, teams in queued.items() for team, count in teams.items()}
        for pool_id, team in self._queued_labels - now.keys():
            self.queued_requests.labels(pool_id, team).set(0)
        for (pool_id, team), count in now.items():
            self.queued_requests.labels(pool_id, team).set(count)
        self._queued_labels |= now.keys()

    @staticmethod
    def leased_tokens(leases: Mapping[str, Mapping[str, TeamLoad]]) -> GaugeMetricFamily:
        """The leases in force (every gateway's, per pool then team) as one scrape's gauge."""
        family = GaugeMetricFamily(
            "switchyard_gateway_leased_tokens",
            "KV tokens leased in force per pool and team (every gateway's leases), by kind.",
            labels=["pool", "team", "kind"],
        )
        for pool_id, teams in leases.items():
            for team, load in teams.items():
                family.add_metric([pool_id, team, "owned"], load.owned_tokens)
                family.add_metric([pool_id, team, "borrowed"], load.borrowed_tokens)
        return family

    def collector(self) -> Collector:
        """What a scrape reads: every worker's files in multiprocess mode, else `registry`."""
        if self.multiprocess_dir is None:
            return self.registry
        return worker_metrics(self.multiprocess_dir)
