"""ServerPicker over a stand-in directory (what the registry and the scrapes would say)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter

from config.settings import load_config
from contracts.generation import GenerationRequest
from fleet_state.server_state import ServerState
from router.routing_policy import ServerLoad
from router.server_picker import ServerPicker


class Directory:
    def __init__(self, loads: list[ServerLoad]) -> None:
        self._loads = loads
        self.scraped_at = {load.server_id: 0.0 for load in loads}

    def loads(self, pool_id: str) -> list[ServerLoad]:
        return list(self._loads) if pool_id == "small" else []


class Clock:
    now = 10.0

    def __call__(self) -> float:
        return self.now


def idle(server_id: str) -> ServerLoad:
    return ServerLoad(server_id, ServerState.READY, 100_000, 100_000, 0, 0)


def request(request_id: str, hashes: tuple[int, ...] = ()) -> GenerationRequest:
    return GenerationRequest(request_id, "small", "p", max_tokens=100, prompt_tokens=1000, prefix_block_hashes=hashes)


def picker(directory: Any, clock: Clock) -> ServerPicker:
    """A picker over the shipped switchyard.yaml's pools (`small` and `large`)."""
    return ServerPicker(load_config(), directory, clock=clock)


def test_this_gateways_unfinished_requests_count_as_load() -> None:
    clock, directory = Clock(), Directory([idle("a"), idle("b")])
    choose = picker(directory, clock)
    first = choose.pick(request("r1"), ())
    assert first is not None
    choose.started(first, request("r1"))
    second = choose.pick(request("r2"), ())
    assert second is not None and second != first  # r1 is not in any scrape yet: it counts
    choose.started(second, request("r2"))
    directory.scraped_at = {"a": 11.0, "b": 11.0}  # a scrape since, but the engines' gauges lag
    choose.ended(first, request("r1"), failed=False)
    assert choose.pick(request("r3"), ()) == first  # r2 still runs on the other one


def test_a_prompt_goes_back_where_its_prefix_went() -> None:
    clock, directory = Clock(), Directory([idle("a"), idle("b"), idle("c")])
    choose = picker(directory, clock)
    went = choose.pick(request("r1", (7, 8, 9)), ())
    assert went is not None
    choose.started(went, request("r1", (7, 8, 9)))
    choose.ended(went, request("r1", (7, 8, 9)), failed=False)
    assert choose.pick(request("r2", (7, 8, 10)), ()) == went


def test_a_server_that_failed_is_skipped_until_scraped_again() -> None:
    clock, directory = Clock(), Directory([idle("a"), idle("b")])
    choose = picker(directory, clock)
    choose.started("a", request("r1"))
    choose.ended("a", request("r1"), failed=True)
    assert {choose.pick(request(f"r{i}"), ()) for i in range(2, 6)} == {"b"}
    assert choose.pick(request("r6"), ("b",)) is None  # nothing else to try
    directory.scraped_at["a"] = 11.0  # it answered a scrape since
    assert choose.pick(request("r7"), ("b",)) == "a"


def test_only_people_take_the_room_bulk_holds() -> None:
    """Neither server has free room for 1,100 tokens; b's engine holds 5,000 of bulk it would
    preempt for a person. A bulk request (or a borrowed one, which runs as bulk) may not."""
    people = ServerLoad("a", ServerState.READY, 100_000, 600, 40, 0)
    bulky = ServerLoad("b", ServerState.READY, 100_000, 500, 60, 0, bulk_tokens=5_000)
    choose = picker(Directory([people, bulky]), Clock())
    assert choose.pick(request("r1"), ()) == "b"
    as_bulk = GenerationRequest("r2", "small", "p", max_tokens=100, prompt_tokens=1000, request_class="bulk")
    assert choose.pick(as_bulk, ()) == "a"  # the least start cost, where it queues


def test_each_choice_is_counted_by_pool_and_reason() -> None:
    registry = CollectorRegistry()
    routed = Counter("routed", "choices", ["pool", "reason"], registry=registry)
    people = ServerLoad("a", ServerState.READY, 100_000, 600, 40, 0)
    bulky = ServerLoad("b", ServerState.READY, 100_000, 500, 60, 0, bulk_tokens=5_000)
    choose = ServerPicker(load_config(), Directory([people, bulky]), clock=Clock(), routed=routed)
    assert choose.pick(request("r1"), ()) == "b"
    assert choose.pick(request("r2"), ()) == "b"
    assert choose.pick(request("r3"), ("a", "b")) is None  # nothing chosen, nothing counted

    def count(reason: str) -> float | None:
        return registry.get_sample_value("routed_total", {"pool": "small", "reason": reason})

    assert (count("displace"), count("no-room")) == (2.0, None)


async def test_readiness_per_pool() -> None:
    clock = Clock()
    ready = await picker(Directory([idle("a")]), clock).readiness()
    assert {(r.pool_id, r.ready) for r in ready} == {("small", True), ("large", False)}


def test_a_later_sample_drops_the_sends_it_already_shows() -> None:
    """The picker keeps each server's load plus its sends between picks; a reading sampled
    after a send must no longer count that send's tokens, even when the numbers are unchanged."""
    small = ServerLoad("a", ServerState.READY, 1_500, 1_500, 0, 0)  # room for one request
    busy = ServerLoad("b", ServerState.READY, 100_000, 50_000, 1, 0)  # room, but much work ahead
    clock, directory = Clock(), Directory([small, busy])
    choose = picker(directory, clock)
    assert choose.pick(request("r1"), ()) == "a"
    choose.started("a", request("r1"))
    assert choose.pick(request("r2"), ()) == "b"  # r1's 1,100 tokens fill a's room
    directory.scraped_at = {"a": 11.0, "b": 11.0}  # sampled after r1 went out, the same numbers
    assert choose.pick(request("r3"), ()) == "a"
