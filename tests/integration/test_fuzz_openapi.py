"""A schema-driven fuzz run: schemathesis reads the live gateway's `/openapi.json` and sends
every route generated requests, valid and invalid, with team `e2e`'s key, against the real
stack (gateway processes, Redis, Triton with the tiny model). It fails on any 5xx and on any
response the document does not describe (status, content type, body schema).

Bounded so the whole run stays near a minute on two cores: `MAX_EXAMPLES` per route and
phase, no stateful phase (links between routes are not declared), and generation routes ask
for at most `MAX_TOKENS` tokens (a fuzzed `max_tokens` of thousands would only make the tiny
model decode longer; the range checks are fuzzed below that cap and by the unit tests).
"""

from __future__ import annotations

import json
import os
from typing import Any

import hypothesis
import hypothesis.strategies as st
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.app import create_app

from .conftest import MODEL_ID, LiveGateway

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

# Cases per route and mode; SWITCHYARD_FUZZ_EXAMPLES=500 digs deeper by hand.
MAX_EXAMPLES = int(os.environ.get("SWITCHYARD_FUZZ_EXAMPLES", "20"))
MAX_TOKENS = 4
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Fields whose size sets how long a valid request runs on the engine.
_LENGTH_FIELDS = ("max_tokens", "max_completion_tokens")


def documented_cases() -> list[tuple[str, str, GenerationMode]]:
    """(method, path, mode) for every operation the gateway documents, read from the app itself
    (what the live one serves), so a new route is fuzzed without anyone listing it here. Only
    an operation that takes input has invalid input to send."""
    spec = create_app().openapi()
    cases = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            cases.append((method.upper(), path, GenerationMode.POSITIVE))
            if op.get("parameters") or op.get("requestBody"):
                cases.append((method.upper(), path, GenerationMode.NEGATIVE))
    return cases


@pytest.fixture(scope="module")
def gateway_schema(live_gateway: LiveGateway) -> Any:
    """The document the live gateway serves."""
    return schemathesis.openapi.from_url(f"{live_gateway.url}/openapi.json")


def steered(case: schemathesis.Case, valid: bool, prompt: str) -> None:
    """Bound the case's cost, and (`valid`) point it at what exists, so fuzzed values reach
    the engine and the stores instead of all ending as 404s: the served model, and a file
    of valid JSONL lines carrying the fuzzed `prompt`."""
    body = case.body
    if isinstance(body, dict):
        body = dict(body)
        for name in _LENGTH_FIELDS:
            value = body.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
                body[name] = MAX_TOKENS
        if valid and "model" in body:
            body["model"] = MODEL_ID
        if valid and "file" in body:
            native = {"prompt": prompt or "a", "max_tokens": MAX_TOKENS}
            line = native if "model" in body else {
                "custom_id": "fuzz", "method": "POST", "url": "/v1/completions", "body": {"model": MODEL_ID, **native}
            }  # fmt: skip
            body["file"] = json.dumps(line).encode() + b"\n"
        case.body = body
    if valid and case.path_parameters and "model_id" in case.path_parameters:
        case.path_parameters = {**case.path_parameters, "model_id": MODEL_ID}


@pytest.mark.parametrize(("method", "path", "mode"), documented_cases())
def test_every_route_answers_as_documented(
    gateway_schema: Any, live_gateway: LiveGateway, method: str, path: str, mode: GenerationMode
) -> None:
    operation = gateway_schema[path][method]

    @hypothesis.given(
        case=operation.as_strategy(generation_mode=mode),
        valid=st.booleans(),
        prompt=st.text(max_size=40),
    )
    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,  # the same cases every run: a failure here is a finding, not noise
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    def answers_as_documented(case: schemathesis.Case, valid: bool, prompt: str) -> None:
        steered(case, valid and mode is GenerationMode.POSITIVE, prompt)
        case.call_and_validate(base_url=live_gateway.url, headers=live_gateway.headers, checks=CHECKS, timeout=60)

    answers_as_documented()
