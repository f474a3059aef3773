"""What both fault runs ask the stack once their load stopped (faults/after_load.py), against a
stand-in gateway (httpx's MockTransport) and hand-made histories and log lines."""

from __future__ import annotations

import json

import httpx

from faults.after_load import generation_checks, metered_usage, retry_check
from faults.chaos_history import History, Outcome


def gateway(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler, base_url="http://gateway")


async def test_metered_usage_sums_interactive_completion_tokens_per_team() -> None:
    asked: list[httpx.Request] = []

    def usage(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        rows = [
            {"team": "alpha", "class": "interactive", "completion_tokens": 5},
            {"team": "alpha", "class": "interactive", "completion_tokens": 7},
            {"team": "alpha", "class": "batch", "completion_tokens": 100},
            {"team": "beta", "class": "interactive", "completion_tokens": 1},
        ]
        return httpx.Response(200, json={"data": rows})

    async with gateway(httpx.MockTransport(usage)) as client:
        assert await metered_usage(client) == {"alpha": 12, "beta": 1}
    (request,) = asked
    assert request.url.path == "/v1/usage" and "start" in request.url.params


async def test_only_failed_calls_with_an_id_are_retried_whole_as_their_team() -> None:
    history = History(clock=0.0)
    failed = history.start_call("alpha", "whole", {"prompt": "p", "request_id": "r1"}, request_id="r1")
    history.end_call(failed, Outcome.ERROR, status=503)
    refused_again = history.start_call("beta", "stream", {"prompt": "q", "request_id": "r2"}, request_id="r2")
    history.end_call(refused_again, Outcome.ERROR, error="transport")
    no_id = history.start_call("alpha", "whole", {"prompt": "p"})
    history.end_call(no_id, Outcome.ERROR, status=503)
    done = history.start_call("alpha", "whole", {"request_id": "r3"}, request_id="r3")
    history.end_call(done, Outcome.OK, status=200)
    posted: list[tuple[str, dict[str, object]]] = []

    def generate(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posted.append((request.headers["authorization"], body))
        return httpx.Response(200 if body["request_id"] == "r1" else 409, text="a conflict")

    headers = {"alpha": {"Authorization": "Bearer a"}, "beta": {"Authorization": "Bearer b"}}
    async with gateway(httpx.MockTransport(generate)) as client:
        check = await retry_check(client, headers, history.calls)
    assert posted == [
        ("Bearer a", {"prompt": "p", "request_id": "r1"}),
        ("Bearer b", {"prompt": "q", "request_id": "r2"}),
    ]
    assert (check.checked, check.violations) == (2, ("r2: retry HTTP 409 a conflict",))


def test_generation_checks_hold_the_logs_against_what_clients_received_and_metering() -> None:
    history = History(clock=0.0)
    once = history.start_call("alpha", "whole", {}, request_id="r1")
    history.end_call(once, Outcome.OK, status=200)
    once.tokens = 4
    plain = history.start_call("beta", "stream", {})
    history.end_call(plain, Outcome.OK, status=200)
    plain.tokens = 3

    def ended(team: str, request_id: str, tokens: int) -> str:
        record = {"message": "generation ended", "team": team, "request_id": request_id, "status": "ok"}
        return json.dumps({**record, "completion_tokens": tokens})

    log = [ended("alpha", "r1", 4), "an unrelated line", ended("beta", "g-7", 3)]
    usage, ids = generation_checks(log, history.calls, {"alpha": 4, "beta": 3})
    assert usage.ok and ids.ok
    log.append(ended("alpha", "r1", 4))  # the same id generated again
    usage, ids = generation_checks(log, history.calls, {"alpha": 8, "beta": 3})
    assert usage.violations == ("alpha: metered 8, received 4",)
    assert ids.violations == ("alpha/r1: generated 2 times",)
