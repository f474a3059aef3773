"""Which server a request goes to: `RoutingPolicy` over the directory's view, plus what this
gateway sent since each server's last scrape, plus the prefix index of where prompts went."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from prometheus_client import Counter

from config.settings import SwitchyardConfig
from contracts.generation import GenerationRequest, PoolReadiness
from fleet_state.server_state import ServerState
from router.prefix_index import PrefixIndex
from router.routing_policy import RoutingPolicy, ServerLoad
from router.server_directory import ServerDirectory


@dataclass(frozen=True, slots=True)
class _Sent:
    server_id: str
    at: float
    tokens: int


class ServerPicker:
    """`ServerPicker` for `FailoverBackend`."""

    def __init__(
        self,
        config: SwitchyardConfig,
        directory: ServerDirectory,
        policy: RoutingPolicy | None = None,
        index: PrefixIndex | None = None,
        clock: Callable[[], float] = time.time,
        routed: Counter | None = None,
    ) -> None:
        """`routed`, when given, counts each choice by pool and the router's reason."""
        self._config = config
        self._directory = directory
        self._policy = policy or RoutingPolicy()
        self._index = index or PrefixIndex()
        self._clock = clock
        self._routed = routed
        self._sent: dict[str, _Sent] = {}  # request id -> where it went
        # The same, by server: a pick looks at every server, so this keeps it O(servers)
        # rather than O(servers x requests in flight).
        self._sent_to: dict[str, dict[str, _Sent]] = {}
        self._failed_at: dict[str, float] = {}  # server -> when a request last failed there
        # server -> (its load as read, when it was sampled, that plus what this gateway sent
        # since): a server's sum is made again only when a new reading comes or a request
        # starts or ends there, not on every pick (at 400 servers a worker with hundreds of
        # requests in flight would otherwise rebuild every server's load on each pick).
        self._adjusted: dict[str, tuple[ServerLoad, float, ServerLoad]] = {}

    def pick(self, request: GenerationRequest, exclude: Collection[str]) -> str | None:
        pools = self._config.pools_for_model(request.model_id)
        if not pools:
            return None
        sent_to, adjusted, scraped_at = self._sent_to, self._adjusted, self._directory.scraped_at
        servers: list[ServerLoad] = []
        for load in self._directory.loads(pools[0]):
            if load.server_id in sent_to:
                since = scraped_at.get(load.server_id, 0.0)
                cached = adjusted.get(load.server_id)
                if cached is None or cached[0] is not load or cached[1] != since:
                    cached = adjusted[load.server_id] = (load, since, self._with_sent(load, since))
                load = cached[2]
            servers.append(load)
        matches = self._index.matches(request.prefix_block_hashes)
        tokens = request.prompt_tokens + request.max_tokens
        home = request.prefix_block_hashes[0] if request.prefix_block_hashes else None
        excluded = [*exclude, *self._suspects()]
        # People's tiers may take bulk's (and flex's) room; flex and bulk wait for free room.
        displace = request.request_class in ("priority", "interactive")
        choice = self._policy.choose(
            servers, tokens, matches, excluded, home_key=home, displace_bulk=displace,
            start_cost_budget=self._start_cost_budget(pools[0], request.slo_ttft_ms),
        )  # fmt: skip
        if choice is None:
            return None
        if self._routed is not None:
            self._routed.labels(pools[0], choice.reason).inc()
        return choice.server_id

    def predicted_ttft_s(self, model_id: str, request_tokens: int, prefix_block_hashes: Sequence[int]) -> float | None:
        """The least start cost over the pool's ready servers (as scraped) over its prefill pace."""
        pools = self._config.pools_for_model(model_id)
        if not pools or (pace := self._config.pools[pools[0]].prefill_tokens_per_s) is None:
            return None
        matches = self._index.matches(tuple(prefix_block_hashes))
        cost = self._policy.least_start_cost(self._directory.loads(pools[0]), request_tokens, matches)
        return None if cost is None else cost / pace

    def _start_cost_budget(self, pool_id: str, slo_ttft_ms: int | None) -> float | None:
        pace = self._config.pools[pool_id].prefill_tokens_per_s
        return None if slo_ttft_ms is None or pace is None else slo_ttft_ms / 1000 * pace

    def started(self, server_id: str, request: GenerationRequest) -> None:
        sent = _Sent(server_id, self._clock(), request.prompt_tokens + request.max_tokens)
        self._forget_sent(request.request_id)
        self._sent[request.request_id] = sent
        self._sent_to.setdefault(server_id, {})[request.request_id] = sent
        self._adjusted.pop(server_id, None)
        self._index.record(request.prefix_block_hashes, server_id)

    def ended(self, server_id: str, request: GenerationRequest, failed: bool) -> None:
        self._forget_sent(request.request_id)
        if failed:  # not routed to again until a scrape after this says it answers
            self._failed_at[server_id] = self._clock()

    def _forget_sent(self, request_id: str) -> None:
        sent = self._sent.pop(request_id, None)
        if sent is not None:
            there = self._sent_to[sent.server_id]
            del there[request_id]
            self._adjusted.pop(sent.server_id, None)
            if not there:
                del self._sent_to[sent.server_id]

    def _suspects(self) -> list[str]:
        scraped = self._directory.scraped_at
        return [server for server, at in self._failed_at.items() if scraped.get(server, 0.0) <= at]

    def forget_server(self, server_id: str) -> None:
        """It left the fleet: its cache went with it."""
        self._index.forget_server(server_id)

    async def readiness(self) -> list[PoolReadiness]:
        return [
            PoolReadiness(
                pool_id,
                pool.model_id,
                any(load.state is ServerState.READY for load in self._directory.loads(pool_id)),
                "" if self._directory.loads(pool_id) else "no server registered or answering",
            )
            for pool_id, pool in self._config.pools.items()
            if pool.target_copies > 0
        ]

    def _with_sent(self, load: ServerLoad, since: float) -> ServerLoad:
        """The scraped load plus what this gateway sent there that the numbers may not show.

        KV: what went out after the scrape. Requests: never fewer than this gateway's own
        unfinished ones there, since an engine's request gauges lag its intake by a few
        hundred milliseconds (a burst would otherwise all look like it fits on one server)."""
        there = self._sent_to.get(load.server_id)
        if not there:
            return load
        mine = there.values()
        scraped = load.active_requests + load.waiting_requests
        # Built directly: `dataclasses.replace` costs several times more, for up to every
        # server of the pool on each pick.
        return ServerLoad(
            load.server_id,
            load.state,
            load.capacity_tokens,
            load.free_tokens,
            load.active_requests,
            load.waiting_requests,
            inflight_tokens=sum(s.tokens for s in mine if s.at > since),
            inflight_requests=max(0, len(mine) - scraped),
            bulk_tokens=load.bulk_tokens,
        )
