"""RoutingPolicy: eligibility, the room rule, prefix affinity held to a bounded load, the
least-loaded fallback, determinism; and the policy driven with the real hashes and index (S4)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from fleet_state.server_state import ServerState
from router.block_hashes import DEFAULT_MAX_BLOCKS, prompt_block_hashes
from router.prefix_index import PrefixIndex
from router.routing_policy import RouteChoice, RoutingPolicy, ServerLoad

READY = ServerState.READY


def server(
    server_id: str,
    state: ServerState = READY,
    capacity: int = 100_000,
    used: int = 0,
    active: int = 0,
    waiting: int = 0,
    inflight_tokens: int = 0,
    inflight_requests: int = 0,
) -> ServerLoad:
    return ServerLoad(server_id, state, capacity, capacity - used, active, waiting, inflight_tokens, inflight_requests)


def fleet(n: int, **kwargs: int) -> list[ServerLoad]:
    return [server(f"s{i}", **kwargs) for i in range(n)]  # type: ignore[arg-type]


def sent(s: ServerLoad, tokens: int) -> ServerLoad:
    """`s` after this gateway sent it a request of `tokens`."""
    return dataclasses.replace(s, inflight_tokens=s.inflight_tokens + tokens, inflight_requests=s.inflight_requests + 1)


policy = RoutingPolicy(load_factor=1.25, block_size=16)


# -- eligibility ------------------------------------------------------------------------------


def test_only_ready_servers_are_chosen() -> None:
    servers = [
        server("a", ServerState.STARTING),
        server("b", ServerState.DRAINING),
        server("c", ServerState.DEAD),
        server("d", used=90_000, active=50),
    ]
    matches = {"a": 10, "b": 10, "c": 10}
    assert policy.choose(servers, 100, matches) == RouteChoice("d", 0, "least-loaded")
    assert policy.choose(servers[:3], 100, matches) is None
    assert policy.choose([], 100, {}) is None


def test_excluded_servers_are_skipped() -> None:
    servers = fleet(2)
    assert policy.choose(servers, 100, {"s0": 3}) == RouteChoice("s0", 3, "prefix")
    assert policy.choose(servers, 100, {"s0": 3}, exclude={"s0"}) == RouteChoice("s1", 0, "least-loaded")
    assert policy.choose(servers, 100, {"s0": 3}, exclude=("s0", "s1")) is None


# -- room -------------------------------------------------------------------------------------


def test_a_server_without_room_is_passed_over_while_another_has_it() -> None:
    servers = [server("a", used=99_600), server("b", used=60_000, active=30)]
    assert policy.choose(servers, 500, {"a": 20}) == RouteChoice("b", 0, "least-loaded")
    assert policy.choose(servers, 400, {"a": 20}) == RouteChoice("a", 20, "prefix")


def test_room_counts_what_this_gateway_sent_since_the_scrape() -> None:
    servers = [server("a", inflight_tokens=99_600, inflight_requests=1), server("b", used=50_000, active=40)]
    assert policy.choose(servers, 500, {"a": 20}) == RouteChoice("b", 0, "least-loaded")


def test_room_comes_before_the_load_bound() -> None:
    # Only a has room, and it is far over the bound: it still gets the request.
    servers = [server("a", active=10), server("b", used=99_900), server("c", used=99_900)]
    assert policy.choose(servers, 500, {}) == RouteChoice("a", 0, "least-loaded")


def test_when_none_has_room_the_least_start_cost_wins() -> None:
    servers = [server("a", used=99_800, active=4), server("b", used=99_900, active=4)]
    assert policy.choose(servers, 1_000, {}) == RouteChoice("a", 0, "no-room")
    # b holds 30 of the 62 blocks: it reads 520 tokens, a reads 1,000; the prefill term decides.
    assert policy.choose(servers, 1_000, {"b": 30}) == RouteChoice("b", 30, "no-room")
    no_prefill_weight = RoutingPolicy(prefix_block_cost=0.0)
    assert no_prefill_weight.choose(servers, 1_000, {"b": 30}) == RouteChoice("a", 0, "no-room")


def test_a_document_goes_where_bulk_would_make_its_room_when_none_has_free_room() -> None:
    """Both servers are nearly full: a holds people's replies, b mostly bulk. Queued on a, a
    30,000-token document would wait for people's replies to end; on b the engine preempts
    bulk for it at once. Bulk requests, and engines that export no bulk KV, get no such room."""
    people = server("a", used=99_000, active=40)
    bulky = dataclasses.replace(server("b", used=99_500, active=60), bulk_tokens=80_000)
    servers = [people, bulky]
    assert policy.choose(servers, 30_000, {}, displace_bulk=True) == RouteChoice("b", 0, "displace")
    assert policy.choose(servers, 30_000, {}) == RouteChoice("a", 0, "no-room")  # bulk: least start cost
    too_little = dataclasses.replace(bulky, bulk_tokens=20_000)  # 500 free + 20,000 < 30,000
    assert policy.choose([people, too_little], 30_000, {}, displace_bulk=True) == RouteChoice("a", 0, "no-room")


def test_free_room_comes_before_displacing_bulk() -> None:
    # c has free room: preempted bulk would be read again, so it is not preempted for nothing.
    free = server("c", used=60_000, active=80)
    bulky = dataclasses.replace(server("b", used=99_500, active=10), bulk_tokens=90_000)
    assert policy.choose([free, bulky], 30_000, {}, displace_bulk=True) == RouteChoice("c", 0, "least-loaded")
    # Among servers that would displace, the least start cost wins, and what this gateway sent
    # since the scrape counts against the room as always.
    other = dataclasses.replace(server("d", used=99_500, active=10, waiting=5), bulk_tokens=90_000)
    assert policy.choose([bulky, other], 30_000, {}, displace_bulk=True) == RouteChoice("b", 0, "displace")
    busy = sent(bulky, 70_000)
    assert policy.choose([busy, other], 30_000, {}, displace_bulk=True) == RouteChoice("d", 0, "displace")


# -- prefix affinity and the bound ------------------------------------------------------------


def test_the_server_with_the_longest_prefix_wins() -> None:
    assert policy.choose(fleet(4), 2_000, {"s1": 1, "s2": 40, "s3": 39}) == RouteChoice("s2", 40, "prefix")
    # Matched blocks come before start cost: s1 would start sooner (1,000 + 920 < 20,000 + 200).
    servers = [server("s0", used=20_000, active=2), server("s1", used=1_000, active=2)]
    assert policy.choose(servers, 1_000, {"s0": 50, "s1": 5}) == RouteChoice("s0", 50, "prefix")


def test_affinity_beats_a_lighter_server_within_the_bound() -> None:
    # Loads 3, 1, 3, 3: mean 2.5, bound 1.25 × 2.5 + 1 = 4.125.
    servers = [
        server("s0", used=3_000, active=3),
        server("s1", used=1_000, active=1),
        server("s2", used=3_000, active=3),
        server("s3", used=3_000, active=3),
    ]
    assert policy.choose(servers, 1_000, {"s0": 50}) == RouteChoice("s0", 50, "prefix")


def test_a_holder_over_the_bound_spills_to_the_least_loaded() -> None:
    # Loads 6, 2, 1, 2: mean 2.75, bound 4.4375; s0 is over it.
    servers = [
        server("s0", used=6_000, active=6),
        server("s1", used=2_000, active=2),
        server("s2", used=1_000, active=1),
        server("s3", used=2_000, active=2),
    ]
    assert policy.choose(servers, 1_000, {"s0": 50}) == RouteChoice("s2", 0, "spill")
    # A shorter holder within the bound beats spilling.
    assert policy.choose(servers, 1_000, {"s0": 50, "s3": 5}) == RouteChoice("s3", 5, "prefix")
    # A looser bound keeps the request with s0.
    assert RoutingPolicy(load_factor=2.0).choose(servers, 1_000, {"s0": 50}) == RouteChoice("s0", 50, "prefix")


def test_an_idle_pool_is_not_blocked_by_the_bound() -> None:
    assert policy.choose(fleet(4), 100, {"s3": 2}) == RouteChoice("s3", 2, "prefix")


def test_equal_matches_go_to_the_least_start_cost_then_the_lowest_id() -> None:
    servers = [
        server("s0", used=2_000, active=1),
        server("s1", used=1_000, active=1),
        server("s2", used=1_000, active=1),
    ]
    assert policy.choose(servers, 500, {"s0": 5, "s1": 5, "s2": 5}) == RouteChoice("s1", 5, "prefix")


# -- least loaded -----------------------------------------------------------------------------


def test_without_matches_the_least_start_cost_wins() -> None:
    servers = [
        server("a", used=8_000, active=2),
        server("b", used=3_000, active=3),
        server("c", used=2_500, active=3, waiting=1),  # 2,500 + one waiting request of ~833
        server("d", used=1_000, active=1, inflight_tokens=2_500, inflight_requests=1),  # 1,000 + 2,500 sent
    ]
    assert policy.choose(servers, 500, {}) == RouteChoice("b", 0, "least-loaded")


def test_equal_start_costs_go_to_fewer_requests_then_the_lowest_id() -> None:
    servers = [server("c", used=4_000, active=1), server("b", used=4_000, active=4), server("a", used=4_000, active=4)]
    assert policy.choose(servers, 500, {}) == RouteChoice("c", 0, "least-loaded")
    assert policy.choose(servers[1:], 500, {}) == RouteChoice("a", 0, "least-loaded")


# -- determinism and validation ---------------------------------------------------------------


def test_equal_inputs_give_equal_choices_in_any_order() -> None:
    rng = random.Random(7)
    for _ in range(200):
        servers = [
            server(
                f"s{i}",
                used=rng.randrange(0, 100_001, 500),
                active=rng.randrange(0, 6),
                waiting=rng.randrange(0, 3),
                inflight_requests=rng.randrange(0, 3),
            )
            for i in range(6)
        ]
        matches = {f"s{i}": rng.randrange(0, 4) for i in rng.sample(range(6), 3)}
        tokens = rng.randrange(1, 5_000)
        choice = policy.choose(servers, tokens, matches)
        assert choice is not None
        assert policy.choose(list(reversed(servers)), tokens, dict(reversed(list(matches.items())))) == choice
        assert policy.choose(rng.sample(servers, len(servers)), tokens, matches) == choice


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="load_factor"):
        RoutingPolicy(load_factor=0.9)
    with pytest.raises(ValueError, match="block_size"):
        RoutingPolicy(block_size=0)
    with pytest.raises(ValueError, match="prefix_block_cost"):
        RoutingPolicy(prefix_block_cost=-1.0)
    with pytest.raises(ValueError, match="request_tokens"):
        policy.choose(fleet(2), -1, {})
    with pytest.raises(ValueError, match="distinct"):
        policy.choose([server("a"), server("a")], 10, {})


# -- driven with the real hashes and index: S4's shared 9,000-token prefix --------------------

PREFIX = list(range(9_000))


def s4_prompt(request_number: int) -> list[int]:
    """The shared prefix and a distinct 200-token tail."""
    start = 100_000 + 200 * request_number
    return PREFIX + list(range(start, start + 200))


def route(servers: dict[str, ServerLoad], index: PrefixIndex, prompt: list[int]) -> tuple[RouteChoice, list[int]]:
    hashes = prompt_block_hashes(prompt, 16, "team-a", DEFAULT_MAX_BLOCKS)
    choice = policy.choose(list(servers.values()), len(prompt), index.matches(hashes))
    assert choice is not None
    return choice, hashes


def test_concurrent_requests_for_a_hot_prefix_spread_within_the_bound() -> None:
    """100 requests in flight at once: each lands within the bound and the prefix spreads."""
    servers = {s.server_id: s for s in fleet(4, capacity=2_000_000)}
    index = PrefixIndex()
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for n in range(100):
        choice, hashes = route(servers, index, s4_prompt(n))
        mean = sum(s.load for s in servers.values()) / 4
        assert servers[choice.server_id].load <= 1.25 * mean + 1
        servers[choice.server_id] = sent(servers[choice.server_id], 9_200)
        index.record(hashes, choice.server_id)
        counts[choice.server_id] += 1
        reasons[choice.reason] += 1
    assert counts == {"s0": 25, "s1": 25, "s2": 25, "s3": 25}
    # One cold start, then each of the three others took over the prefix once and held it.
    assert reasons == {"least-loaded": 1, "spill": 3, "prefix": 96}


def test_a_single_holder_is_held_to_the_bound() -> None:
    """Only s0 ever holds the prefix: it takes what the bound allows, the others the rest."""
    servers = {s.server_id: s for s in fleet(4, capacity=2_000_000)}
    counts: Counter[str] = Counter()
    for _ in range(100):
        choice = policy.choose(list(servers.values()), 9_200, {"s0": 562})
        assert choice is not None
        servers[choice.server_id] = sent(servers[choice.server_id], 9_200)
        counts[choice.server_id] += 1
    # The bound at the end: 1.25 × 25 + 1 = 32.25.
    assert counts == {"s0": 32, "s1": 23, "s2": 23, "s3": 22}


def test_requests_one_after_another_land_where_the_prefix_is_cached() -> None:
    """S4: each request finishes before the next, on a pool with equal background load; the
    holder takes ≥ 90% (random routing: about 25%)."""
    servers = {s.server_id: s for s in fleet(4, used=20_000, active=5)}
    index = PrefixIndex()
    index.record(prompt_block_hashes(s4_prompt(-1), 16, "team-a", DEFAULT_MAX_BLOCKS), "s2")
    rng = random.Random(0)
    routed_to_holder = randomly_to_holder = 0
    for n in range(100):
        choice, hashes = route(servers, index, s4_prompt(n))
        index.record(hashes, choice.server_id)
        routed_to_holder += choice.server_id == "s2" and choice.matched_blocks == 562
        randomly_to_holder += rng.choice(sorted(servers)) == "s2"
    assert routed_to_holder == 100  # S4 asks for ≥ 90
    assert randomly_to_holder <= 40


def test_a_new_prefix_goes_to_its_rendezvous_home_in_every_gateway_process() -> None:
    """Two gateway workers, each with its own (empty) index, place a new prefix on the same server."""
    servers = fleet(4)
    home = prompt_block_hashes(list(range(64)), 16, "team")[0]
    first = RoutingPolicy().choose(servers, 100, PrefixIndex().matches([home]), home_key=home)
    second = RoutingPolicy().choose(list(reversed(servers)), 100, {}, home_key=home)
    assert first is not None and second is not None
    assert first.server_id == second.server_id and first.reason == "home"


def test_new_prefixes_spread_over_the_pool() -> None:
    servers = fleet(4)
    homes = Counter()
    for i in range(400):
        key = prompt_block_hashes([i] * 16, 16, "team")[0]
        choice = RoutingPolicy().choose(servers, 100, {}, home_key=key)
        assert choice is not None
        homes[choice.server_id] += 1
    assert len(homes) == 4 and min(homes.values()) >= 70, homes


def test_a_home_over_the_bound_is_passed_over() -> None:
    servers = fleet(4)
    key = prompt_block_hashes(list(range(16)), 16, "team")[0]
    home = RoutingPolicy().choose(servers, 100, {}, home_key=key)
    assert home is not None
    busy = [dataclasses.replace(s, active_requests=20) if s.server_id == home.server_id else s for s in servers]
    moved = RoutingPolicy().choose(busy, 100, {}, home_key=key)
    assert moved is not None and moved.server_id != home.server_id
