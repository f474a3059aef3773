"""Bad input to POST /v1/generate: always a 4xx with the one error shape, a message that says
what to change, and no work for the backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

GOOD = {"model": "small", "prompt": "the quick brown fox", "max_tokens": 3}


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != key}


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        (without("max_tokens"), "max_tokens", "'max_tokens' is required: an integer >= 1"),
        ({**GOOD, "max_tokens": 0}, "max_tokens", "got 0 (input should be greater than or equal to 1)"),
        ({**GOOD, "max_tokens": -5}, "max_tokens", "; got -5 ("),
        ({**GOOD, "max_tokens": "5"}, "max_tokens", "got '5' (input should be a valid integer)"),
        ({**GOOD, "max_tokens": 2.5}, "max_tokens", "got 2.5 (input should be a valid integer)"),
        ({**GOOD, "max_tokens": True}, "max_tokens", "got True (input should be a valid integer)"),
        ({**GOOD, "max_tokens": None}, "max_tokens", "'max_tokens' must be an integer >= 1"),
        (without("prompt"), "prompt", "'prompt' is required: a non-empty string"),
        ({**GOOD, "prompt": ""}, "prompt", "at least 1 character"),
        ({**GOOD, "prompt": 42}, "prompt", "'prompt' must be a non-empty string; got 42"),
        ({**GOOD, "prompt": ["a", "b"]}, "prompt", "'prompt' must be a non-empty string"),
        (without("model"), "model", "'model' is required: a model id (a string) from GET /v1/models"),
        ({**GOOD, "model": 7}, "model", "'model' must be a model id (a string) from GET /v1/models; got 7"),
        ({**GOOD, "stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4 items"),
        ({**GOOD, "stop": [""]}, "stop.0", "at least 1 character"),
        (
            {**GOOD, "stop": 5},
            "stop",
            "'stop' must be a string or a list of at most 4 strings of 1-256 characters; got 5",
        ),
        ({**GOOD, "class": "urgent"}, "class", "'class' must be 'interactive' or 'bulk'; got 'urgent'"),
        ({**GOOD, "stream": "yes"}, "stream", "'stream' must be true or false"),
        ({**GOOD, "temperature": 2.5}, "temperature", "a number from 0 to 2"),
        ({**GOOD, "temperature": -0.1}, "temperature", "greater than or equal to 0"),
        ({**GOOD, "temperature": "hot"}, "temperature", "valid number"),
        ({**GOOD, "top_p": 0}, "top_p", "got 0 (is below the smallest positive 32-bit float"),
        ({**GOOD, "top_p": 1.5}, "top_p", "less than or equal to 1"),
        ({**GOOD, "top_k": -1}, "top_k", "greater than or equal to 0"),
        # Values the engine refuses once they are its tensor's dtype: top_p is 0.0 as FP32; and
        # below the same bound where FP32 would round up (the document's minimum is that bound).
        (
            {**GOOD, "top_p": 1e-50},
            "top_p",
            "below the smallest positive 32-bit float: send at least 1.401298464324817e-45",
        ),
        ({**GOOD, "top_p": 1e-45}, "top_p", "below the smallest positive 32-bit float"),
        ({**GOOD, "top_k": 2**31}, "top_k", "less than or equal to 2147483647"),
        ({**GOOD, "temperature": 1e300}, "temperature", "less than or equal to 2"),
        ({**GOOD, "stop": ["x" * 257]}, "stop", "stop string 0 has 257 characters; at most 256 are allowed"),
        ({**GOOD, "seed": "abc"}, "seed", "a 64-bit integer"),
        ({**GOOD, "seed": 2**64}, "seed", "less than or equal to"),
        ({**GOOD, "ignore_eos": 1}, "ignore_eos", "true or false"),
        ({**GOOD, "request_id": "has space"}, "request_id", "A-Z, a-z, 0-9"),
        ({**GOOD, "request_id": ""}, "request_id", "at least 1 character"),
        ({**GOOD, "temprature": 0.5}, "temprature", "unknown field 'temprature': remove it"),
    ],
)
async def test_bad_field_is_400_naming_it(
    client: httpx.AsyncClient, backend: Any, body: dict[str, Any], param: str, says: str
) -> None:
    response = await client.post("/v1/generate", json=body)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert says in error["message"]
    assert backend.requests == []


async def test_every_problem_is_reported_at_once(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/generate", json={"model": "small", "prompt": "", "max_tokens": 0})
    message = error_of(response)["message"]
    assert "'prompt'" in message and "'max_tokens'" in message


async def test_body_that_is_not_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/generate", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in error_of(response)["message"]


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("path", ["/v1/generate", "/v1/completions", "/v1/chat/completions"])
async def test_invalid_json_names_its_position_in_the_message_not_in_param(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.post(path, content=b'{"model": "small", "prompt": x}', headers=JSON)
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] is None and error["code"] == "invalid_json"
    assert error["message"] == "request body is not valid JSON: Expecting value at character 29"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"model": "sm\xffall", "prompt": "x", "max_tokens": 1}', "not valid UTF-8: byte 0xff at offset 13"),
        (b"[" * 100_000 + b"]" * 100_000, "nests arrays or objects too deeply"),
    ],
)
async def test_a_body_json_cannot_parse_says_why(
    client: httpx.AsyncClient, backend: Any, body: bytes, says: str
) -> None:
    response = await client.post("/v1/completions", content=body, headers=JSON)
    assert response.status_code == 400
    error = error_of(response)
    assert says in error["message"] and error["code"] == "invalid_json" and error["param"] is None
    assert backend.requests == []


async def test_body_that_is_not_an_object(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/generate", json=["small", "hi", 3])
    assert response.status_code == 400
    assert error_of(response)["message"] == "request body must be a JSON object"


async def test_unknown_model_is_404_listing_the_served_ones(client: httpx.AsyncClient, backend: Any) -> None:
    response = await client.post("/v1/generate", json={**GOOD, "model": "huge"})
    assert response.status_code == 404
    error = error_of(response)
    assert error == {
        "type": "not_found_error",
        "message": "model 'huge' is not served here; use one of: small, large (GET /v1/models)",
        "param": "model",
        "code": "model_not_found",
    }
    assert backend.requests == []


async def test_over_context_is_400_saying_the_limit(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    prompt = "the quick brown fox jumps over the lazy dog " * 4
    n = count_tokens(prompt)
    assert 0 < n < 64
    response = await client.post("/v1/generate", json={**GOOD, "prompt": prompt, "max_tokens": 64 - n + 1})
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "max_tokens"
    assert error["message"] == (
        f"prompt ({n} tokens) + max_tokens ({64 - n + 1}) exceeds model 'small' context of 64 tokens: "
        f"lower max_tokens to at most {64 - n} or shorten the prompt"
    )
    assert backend.requests == []


async def test_prompt_alone_over_context_asks_to_shorten_it(
    client: httpx.AsyncClient, count_tokens: Callable[[str], int]
) -> None:
    prompt = "servers that take eight minutes to help " * 12  # within the byte bound, over in tokens
    response = await client.post("/v1/generate", json={**GOOD, "prompt": prompt, "max_tokens": 1})
    error = error_of(response)
    assert response.status_code == 400
    assert error["param"] == "prompt"
    assert error["message"].startswith(f"prompt ({count_tokens(prompt)} tokens) + max_tokens (1) exceeds")
    assert error["message"].endswith("context of 64 tokens: shorten the prompt")


async def test_exactly_the_context_is_accepted(
    client: httpx.AsyncClient, backend: Any, count_tokens: Callable[[str], int]
) -> None:
    prompt = "the quick brown fox"
    response = await client.post("/v1/generate", json={**GOOD, "max_tokens": 64 - count_tokens(prompt)})
    assert response.status_code == 200
    assert len(backend.requests) == 1


async def test_unknown_route_uses_the_error_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert (error_of(response)["type"], error_of(response)["code"]) == ("not_found_error", "not_found")


async def test_wrong_method_uses_the_error_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/generate")
    assert response.status_code == 405
    assert (error_of(response)["type"], error_of(response)["code"]) == ("invalid_request_error", "method_not_allowed")
