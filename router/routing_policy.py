"""Which server of a pool gets a request: prefix affinity, held to a bounded load.

A request goes where its prompt's prefix is cached (the server reads only the uncached tail),
unless that server is already much busier than the pool (consistent hashing with bounded
loads, Mirrokni, Thorup and Zadimoghaddam 2018): then it goes to the least loaded server within
the bound, which the prefix index then records as a second holder, so a hot prefix spreads over
as many servers as its traffic needs and no further.

    eligible:   READY, not excluded ───────────────────────────────────────▶ none: None
    candidates: eligible with room for the request (free − in flight ≥ tokens)
                none, and the request may displace bulk: least start cost of the eligible
                  whose bulk would make the room (free − in flight + bulk ≥ tokens) ("displace")
                none has room ─▶ least start cost of the eligible ("no-room")
    bound:      load ≤ load_factor × mean load of the eligible + 1
    holders (matched > 0) among candidates within the bound
                ─▶ most matched blocks, then least start cost ("prefix")
    otherwise   ─▶ least start cost among candidates within the bound
                   ("spill" if a candidate held the prefix, else "least-loaded");
                   if no candidate is within it (the least loaded lacks room),
                   least start cost among candidates ("least-loaded")

Two measures of a server, for two jobs:

- load, in requests: active + waiting + this gateway's in-flight requests. The bound is the
  paper's, on counts (the + 1 lets an idle pool place its first requests anywhere).
- start cost, in tokens: an estimate of how soon this request's first token comes, for ranking
  servers ("least loaded"): the work ahead of it plus the prompt it must read,

      start cost = KV in use + in-flight tokens + waiting × (KV in use / active)
                   + prefix_block_cost × (request tokens − matched blocks × block_size)

  KV in use stands for the decode streams the request will share steps with (each step reads
  all of it); a waiting request is assumed as large as an admitted one (the scrape gives no
  queued tokens), or as this request when none is admitted. `prefix_block_cost` weighs a token
  to prefill against a token of work ahead (1.0: alike, as in Dynamo's KV router). Since the
  affinity rule ranks by matched blocks first, the prefill term decides only where matches
  differ among the servers ranked by start cost: the no-room case.

An interactive request on an engine that preempts bulk for people (the CPU reference engine
exports the KV bulk holds; TensorRT-LLM does not) may take bulk's room: a document sent to a
server whose KV is people's would wait for their replies to end, and hold up every request
queued behind it, while on one full of bulk it starts at once. Free room still comes first:
preempted bulk is read again later.

A request with a first-token target (`x-slo-ttft-ms`, docs/tiers.md) turns it into a start-cost
budget (target × the pool's `prefill_tokens_per_s`): where the affinity rules chose a server
whose start cost is over it and the cheapest candidate is within it, the cheapest wins ("slo").

Deterministic: equal inputs give equal choices, whatever the order of `servers`; the last
tie-break is the server id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from fleet_state.server_state import ServerState

REASON_PREFIX = "prefix"  # a server holding the prefix, within the bound
REASON_SPILL = "spill"  # servers held the prefix but all were over the bound
REASON_LEAST_LOADED = "least-loaded"  # no candidate held the prefix (or none with room was within the bound)
REASON_NO_ROOM = "no-room"  # no eligible server had room; the engine will queue it
REASON_HOME = "home"  # no server within the bound held the prefix: its rendezvous-hash home
REASON_DISPLACE = "displace"  # no server had free room: one where preempting bulk makes it
REASON_SLO = "slo"  # the affinity rules' choice would miss the request's TTFT target; the cheapest meets it


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """One server as the router sees it: its state and the load its metrics last reported, plus
    what this gateway sent it since."""

    server_id: str
    state: ServerState
    capacity_tokens: int  # KV tokens
    free_tokens: int  # KV tokens free (as last scraped)
    active_requests: int  # admitted in the engine (scraped)
    waiting_requests: int  # queued in the engine (scraped)
    inflight_tokens: int = 0  # prompt+max_tokens this gateway has sent there since that scrape (its own accounting)
    inflight_requests: int = 0
    bulk_tokens: int = 0  # KV held by bulk that an interactive request may preempt (as last scraped)

    @property
    def load(self) -> int:
        """Requests on the server or on their way to it: what the bounded-load rule counts."""
        return self.active_requests + self.waiting_requests + self.inflight_requests

    @property
    def room_tokens(self) -> int:
        """KV tokens free once what this gateway sent since the scrape is admitted."""
        return self.free_tokens - self.inflight_tokens


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """Where one request goes, and why."""

    server_id: str
    matched_blocks: int  # prefix blocks it holds
    reason: str  # "prefix", "spill", "least-loaded", "no-room": for logs and metrics


class RoutingPolicy:
    """Chooses a server for one request from a snapshot of the pool.

    Holds no state between calls, so concurrent requests may share one instance; what keeps
    them from piling onto one server is the caller adding each choice to that server's
    `inflight_*` before the next snapshot.

    `block_size` is the one the prompt's block hashes were made with (`router.block_hashes`).
    """

    def __init__(self, load_factor: float = 1.25, block_size: int = 16, prefix_block_cost: float = 1.0) -> None:
        # Below 1 the bound could exclude every server (all at the mean, the mean large).
        if load_factor < 1.0:
            raise ValueError(f"load_factor must be at least 1, got {load_factor}")
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if prefix_block_cost < 0:
            raise ValueError(f"prefix_block_cost must be non-negative, got {prefix_block_cost}")
        self.load_factor = load_factor
        self.block_size = block_size
        self.prefix_block_cost = prefix_block_cost

    def choose(
        self,
        servers: Sequence[ServerLoad],
        request_tokens: int,
        matches: Mapping[str, int],
        exclude: Collection[str] = (),
        home_key: int | None = None,
        displace_bulk: bool = False,
        start_cost_budget: float | None = None,
    ) -> RouteChoice | None:
        """The server for a request of `request_tokens` (prompt + max_tokens); None if none is eligible.

        `matches` is `PrefixIndex.matches` for the prompt (servers missing from it hold none);
        `exclude` lists servers already tried for this request (a retry after a failure);
        `home_key` (the prompt's first block hash) places a prefix no server within the bound
        holds: the within-bound server ranked first for it by rendezvous hashing. Every gateway
        process ranks alike without sharing an index, so a new prefix lands on one server, not
        on whichever each process thinks least loaded; and prefixes spread over the pool.
        `displace_bulk`: the request is interactive, so where no server has free room it may
        go where bulk's KV would make it (see the module docstring). `start_cost_budget`: the
        most start cost that meets the request's first-token target (its TTFT target times the
        pool's prefill pace): a server the affinity rules chose that costs more gives way to the
        least costly candidate when that one meets it ("slo").
        """
        if request_tokens < 0:
            raise ValueError(f"request_tokens must be non-negative, got {request_tokens}")
        # Two passes over the pool for what every rule below needs (a pick is on each request's
        # path: at 400 servers its passes over them are what it costs, so the loads are read
        # inline rather than through the properties).
        excluded = set(exclude) if exclude else ()
        eligible: list[ServerLoad] = []
        loads: list[int] = []
        total_load = 0
        ready = ServerState.READY
        for server in servers:
            if server.state is ready and server.server_id not in excluded:
                load = server.active_requests + server.waiting_requests + server.inflight_requests
                eligible.append(server)
                loads.append(load)
                total_load += load
        if not eligible:
            return None
        if len({s.server_id for s in eligible}) != len(eligible):
            raise ValueError("servers must have distinct server_ids")

        def matched(server: ServerLoad) -> int:
            return max(matches.get(server.server_id, 0), 0)

        read_all = self.prefix_block_cost * max(request_tokens, 0)  # a start that matches nothing

        def least_loaded(server: ServerLoad) -> tuple[float, int, str]:
            # Tokens of work before this request's first token there (the module docstring),
            # then its load and id to break ties. Inline: it runs for every server on most picks.
            kv_in_use = max(server.capacity_tokens - server.free_tokens, 0)
            active = server.active_requests
            per_waiting = kv_in_use / active if active > 0 else request_tokens
            work_ahead = kv_in_use + server.inflight_tokens + server.waiting_requests * per_waiting
            blocks = matches.get(server.server_id, 0) if matches else 0
            if blocks > 0:
                cost = work_ahead + self.prefix_block_cost * max(request_tokens - blocks * self.block_size, 0)
            else:
                cost = work_ahead + read_all
            load = active + server.waiting_requests + server.inflight_requests
            return (cost, load, server.server_id)

        def choice(server: ServerLoad, reason: str) -> RouteChoice:
            return RouteChoice(server.server_id, matched(server), reason)

        # With room for the request; of those, within the bound; of those, holding the prefix.
        bound = self.load_factor * total_load / len(eligible) + 1
        candidates: list[ServerLoad] = []
        within: list[ServerLoad] = []
        holders: list[ServerLoad] = []
        for server, load in zip(eligible, loads, strict=True):
            if server.free_tokens - server.inflight_tokens >= request_tokens:
                candidates.append(server)
                if load <= bound:
                    within.append(server)
                    if matches and matches.get(server.server_id, 0) > 0:
                        holders.append(server)
        if not candidates and displace_bulk:
            displacing = [s for s in eligible if s.room_tokens + max(s.bulk_tokens, 0) >= request_tokens]
            if displacing:
                return choice(min(displacing, key=least_loaded), REASON_DISPLACE)
        if not candidates:
            return choice(min(eligible, key=least_loaded), REASON_NO_ROOM)
        cheapest = min(candidates, key=least_loaded)
        if holders:
            picked, reason = min(holders, key=lambda s: (-matched(s), *least_loaded(s))), REASON_PREFIX
        elif not within:
            # The least loaded eligible server is always within the bound, but it may lack room;
            # then room comes first: an over-bound server still starts the request sooner.
            picked, reason = cheapest, REASON_LEAST_LOADED
        elif home_key is not None:
            picked, reason = max(within, key=lambda s: _rendezvous(home_key, s.server_id)), REASON_HOME
        else:
            reason = REASON_SPILL if matches and any(matched(s) > 0 for s in candidates) else REASON_LEAST_LOADED
            picked = min(within, key=least_loaded)
        if (
            start_cost_budget is not None
            and picked is not cheapest
            and least_loaded(picked)[0] > start_cost_budget >= least_loaded(cheapest)[0]
        ):
            return choice(cheapest, REASON_SLO)
        return choice(picked, reason)

    def least_start_cost(
        self, servers: Sequence[ServerLoad], request_tokens: int, matches: Mapping[str, int]
    ) -> float | None:
        """The least start cost over the ready servers (None: none is ready): over the pool's
        prefill pace, the soonest this request's first token can come."""
        costs = [self.start_cost(s, request_tokens, matches) for s in servers if s.state is ServerState.READY]
        return min(costs, default=None)

    def start_cost(self, server: ServerLoad, request_tokens: int, matches: Mapping[str, int]) -> float:
        """Tokens of work before this request's first token on `server` (the module docstring;
        `choose` computes the same inline, as it runs for every server on most picks)."""
        kv_in_use = max(server.capacity_tokens - server.free_tokens, 0)
        per_waiting = kv_in_use / server.active_requests if server.active_requests > 0 else request_tokens
        work_ahead = kv_in_use + server.inflight_tokens + server.waiting_requests * per_waiting
        blocks = matches.get(server.server_id, 0) if matches else 0
        return work_ahead + self.prefix_block_cost * max(request_tokens - max(blocks, 0) * self.block_size, 0)


def _rendezvous(key: int, server_id: str) -> int:
    """Highest-random-weight score of a server for a key, the same in every process."""
    digest = hashlib.blake2b(f"{key}:{server_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
