"""A schema-driven fuzz run: schemathesis reads the live gateway's `/openapi.json` and sends
every route generated requests, valid and invalid, with team `e2e`'s key, against the real
stack (gateway processes, Redis, Triton with the tiny model), and runs every check it has on
each answer: `--checks all`, as `schemathesis run` would.

Two phases per route, as `schemathesis run` has them:

    coverage  each field's edges, deterministically: bounds and just past them, empty and
              missing values, wrong types, and methods the path does not serve (405 + Allow)
    fuzzing   MAX_EXAMPLES generated cases per route and mode (valid, invalid)

No stateful phase: links between routes are not declared, so the checks that follow them
(use_after_free, ensure_resource_availability) pass without finding anything to follow;
object_level_authorization needs a second identity configured, so it does the same. A valid
case is steered to keep the rules the document states in words (fuzz_steering.py), and
generation routes ask for at most MAX_TOKENS tokens (a fuzzed `max_tokens` of thousands would
only make the tiny model decode longer; the range checks are fuzzed below that cap and by the
unit tests).
"""

from __future__ import annotations

import os
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import Failure, FailureGroup

from gateway.app import create_app

from .conftest import MODEL_ID, LiveGateway
from .fuzz_steering import steered

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

# Cases per route and mode in the fuzzing phase; SWITCHYARD_FUZZ_EXAMPLES=500 digs deeper by hand.
MAX_EXAMPLES = int(os.environ.get("SWITCHYARD_FUZZ_EXAMPLES", "20"))

load_all_checks()
# Every check schemathesis has (`--checks all`): the function checks of its registry.
ALL_CHECKS = [check for check in CHECKS.get_all() if not isinstance(check, type)]
CONFIG = SchemathesisConfig.from_dict(
    {
        # The key is team e2e's, sent with every case (as `schemathesis run -H` sends it), not a
        # generated header: a case "without" it would still carry it, and be judged as if not.
        # `ignored_auth` sends each answered case again without the key, and with a wrong one:
        # it takes the key away by the scheme's header name, `Authorization`, matching case
        # (`fuzz_headers`).
        "generation": {"mode": "all", "with-security-parameters": False},
        "phases": {"stateful": {"enabled": False}},
    }
)


def documented_operations() -> list[tuple[str, str, bool]]:
    """(method, path, has input that can be invalid) of every operation the gateway documents,
    read from the app itself (what the live one serves), so a new route is fuzzed without anyone
    listing it here."""
    spec = create_app().openapi()
    return [
        (method.upper(), path, "requestBody" in op or any(_rules_out(p["schema"]) for p in op.get("parameters", [])))
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    ]


def _rules_out(schema: dict[str, Any]) -> bool:
    """Whether a parameter's schema rules any value out: a string id in a path does not (any
    text is an id, one that names nothing is a 404), so it has no invalid input to generate."""
    if "anyOf" in schema:
        return any(_rules_out(option) for option in schema["anyOf"] if option.get("type") != "null")
    return schema.get("type") != "string" or bool(set(schema) - {"type", "title", "description", "default"})


def fuzzed_cases() -> list[tuple[str, str, GenerationMode]]:
    """Each operation in valid mode, and in invalid mode when it has input that can be invalid."""
    cases = []
    for method, path, can_be_invalid in documented_operations():
        cases.append((method, path, GenerationMode.POSITIVE))
        if can_be_invalid:
            cases.append((method, path, GenerationMode.NEGATIVE))
    return cases


@pytest.fixture(scope="module")
def gateway_schema(live_gateway: LiveGateway) -> Any:
    """The document the live gateway serves."""
    return schemathesis.openapi.from_url(f"{live_gateway.url}/openapi.json", config=CONFIG)


def fuzz_headers(gateway: LiveGateway) -> dict[str, str]:
    """The key under the name the document's security scheme gives it: schemathesis matches
    that name's case when it takes the key away for its probes (a lower-case `authorization`
    rode along on every probe "without" the key, and the gateway rightly answered it)."""
    return {"Authorization": gateway.headers["authorization"]}


def answer_and_check(case: schemathesis.Case, gateway: LiveGateway) -> str | None:
    """Send the (steered) case and run every check on its answer: None, or what failed."""
    steered(case, MODEL_ID)
    try:
        case.call_and_validate(base_url=gateway.url, headers=fuzz_headers(gateway), checks=ALL_CHECKS, timeout=60)
    except (AssertionError, Failure, FailureGroup) as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(("method", "path"), [(method, path) for method, path, _ in documented_operations()])
def test_every_edge_of_every_route_answers_as_documented(
    gateway_schema: Any, live_gateway: LiveGateway, method: str, path: str
) -> None:
    """The coverage phase: every case, every check, and every failure reported together."""
    operation = gateway_schema[path][method]
    generation = gateway_schema.config.generation_for(operation=operation, phase="coverage")
    cases = gateway_schema.iter_coverage_cases(
        operation, generation_modes=generation.modes, generation_config=generation
    )
    failures = [failure for case in cases if (failure := answer_and_check(case, live_gateway)) is not None]
    assert not failures, f"{len(failures)} cases failed:\n\n" + "\n\n".join(failures)


@pytest.mark.parametrize(("method", "path", "mode"), fuzzed_cases())
def test_every_route_answers_fuzzed_input_as_documented(
    gateway_schema: Any, live_gateway: LiveGateway, method: str, path: str, mode: GenerationMode
) -> None:
    operation = gateway_schema[path][method]

    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,  # the same cases every run: a failure here is a finding, not noise
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    def answers_as_documented(case: schemathesis.Case) -> None:
        failure = answer_and_check(case, live_gateway)
        assert failure is None, failure

    answers_as_documented()
