"""What the schema fuzz run changes in a generated case before sending it, and why.

A JSON schema says what each field may hold; it cannot say what exists (a model, a batch to page
after), nor rules between fields or against the clock (`end` after `start`, a deadline within
24 hours), nor that an integer must be spelled as one. The OpenAPI document states those rules
in words (each route's 400 description, the fields' descriptions), and the gateway refuses what
breaks them with a 400 that says which. A case schemathesis generates as valid may break one;
`positive_data_acceptance` would then call the refusal a bug. So a valid case is steered to keep
the rules, using the gateway's own parsers, and only where it breaks them; an invalid case is
sent as generated (only its cost is bounded).

    rule (stated in the document)                     what a valid case gets
    an integer is spelled as one (2.0 is refused,     whole floats written as integers
      as OpenAI refuses it)
    seed within int64 (schemathesis compares numbers  integers past int64 brought to its ends
      as doubles, so to it 2^63+191 is 2^63-1)
    the model's chat template: a system message       roles set to the template's turns
      first or none, then user and assistant by turns
    a model must be served                            half of the cases: the served model
    a batch file is JSONL                             one valid line
    max_tokens and max_completion_tokens agree        the second set to the first
    stream_options only with stream: true             stream_options dropped
    usage: end after start, both within the UTC       start and end dropped (today so far)
      range, a team's key at most 31 days
    a batch deadline: in the future, within 24 h      the default (24 h)
    after: names one of the team's batches            dropped (the first page)
    a message's fields are its role's (tool_call_id    the fields of the role it is given
      for tool, tool_calls for assistant)
    a JSON schema llguidance compiles (response_format, `{"type": "object"}` / no parameters
      tools' parameters)
    tool_choice names one of the tools; required or    "auto" / dropped
      a name needs tools; tools in force and a
      response_format are not combined
    top_logprobs only with logprobs: true              logprobs set to true
    service_tier and X-Switchyard-Class name the       service_tier dropped
      same tier when both are sent
"""

from __future__ import annotations

import json
import time
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from pydantic import TypeAdapter, ValidationError

from bulk.deadlines import parse_deadline
from contracts.schemas import INT32_MAX, INT64_MAX, INT64_MIN
from quota.usage import as_utc

MAX_TOKENS = 4
MAX_DEADLINE_S = 24 * 3600.0  # bulk.max_deadline_s of the live gateway's config (the default)
TEAM_MAX_RANGE = timedelta(days=31) - timedelta(minutes=1)  # the route's 31 days, less a minute's slack
# Fields whose size sets how long a valid request runs on the engine.
_LENGTH_FIELDS = ("max_tokens", "max_completion_tokens")
_MOMENT = TypeAdapter(datetime)  # the parser FastAPI reads `start` and `end` with


def steered(case: schemathesis.Case, model_id: str) -> None:
    """Bound the case's cost and, when it is meant to be valid, keep it within the rules above."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if isinstance(case.body, dict):
        body = _whole_numbers(case.body) if positive else dict(case.body)
        for name in _LENGTH_FIELDS:
            value = body.get(name)
            # Only a value the gateway would take: capping one past INT32_MAX would make an invalid
            # case valid (schemathesis judges a case again once it is changed).
            if isinstance(value, int) and not isinstance(value, bool) and MAX_TOKENS < value <= INT32_MAX:
                body[name] = MAX_TOKENS
        if positive:
            _keep_body_rules(body, model_id, heads=_heads(case))
            if body.get("service_tier") not in (None, "auto") and (case.headers or {}).get("x-switchyard-class"):
                del body["service_tier"]  # the header alone names the tier
        case.body = body
    if positive and case.query:
        case.query = _kept_query_rules(case.operation.path, dict(case.query))
    if positive and _heads(case) and case.path_parameters and "model_id" in case.path_parameters:
        case.path_parameters = {**case.path_parameters, "model_id": model_id}


def _heads(case: schemathesis.Case) -> bool:
    """A fair coin per case that lands the same way every run (a hash of what it sends): half
    the valid cases name what exists, half keep their generated names (and meet the 404s)."""
    return zlib.crc32(repr((case.body, case.query, case.path_parameters)).encode()) % 2 == 0


def _whole_numbers(value: Any) -> Any:
    """`value` with every whole float (2.0) written as the integer it is (2), within int64."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return min(max(value, INT64_MIN), INT64_MAX)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _keep_body_rules(body: dict[str, Any], model_id: str, *, heads: bool) -> None:
    if heads and "model" in body:
        body["model"] = model_id
    if "file" in body:
        native = {"prompt": "fuzz", "max_tokens": MAX_TOKENS}
        line = native if "model" in body else {
            "custom_id": "fuzz", "method": "POST", "url": "/v1/completions", "body": {"model": model_id, **native}
        }  # fmt: skip
        body["file"] = json.dumps(line) + "\n"
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        body["max_completion_tokens"] = body["max_tokens"]
    if body.get("stream_options") is not None and body.get("stream") is not True:
        del body["stream_options"]
    if isinstance(body.get("messages"), list):
        body["messages"] = _template_turns(body["messages"])
    _keep_grammar_rules(body)
    for name in ("deadline", "completion_window"):
        if isinstance(body.get(name), str) and not _deadline_allowed(body[name]):
            del body[name]


def _template_turns(messages: list[Any]) -> list[Any]:
    """`messages` with the roles the tiny model's template (Llama 2's) takes: a system message
    first or none, then user and assistant by turns, starting with the user."""
    system = bool(messages) and len(messages) > 1 and messages[0].get("role") in ("system", "developer")
    turns = []
    for index, message in enumerate(messages[1:] if system else messages):
        role = "user" if index % 2 == 0 else "assistant"
        turn = {key: value for key, value in message.items() if key != "tool_call_id"}
        if role == "user":
            turn.pop("tool_calls", None)
            turn["content"] = turn.get("content") if turn.get("content") is not None else ""
        turns.append({**turn, "role": role})
    first = messages[0] if system else None
    if first is not None:
        first = {key: value for key, value in first.items() if key not in ("tool_call_id", "tool_calls")}
        first["content"] = first.get("content") if first.get("content") is not None else ""
    return [first, *turns] if first is not None else turns


def _keep_grammar_rules(body: dict[str, Any]) -> None:
    """Schemas llguidance compiles, a tool_choice that names a tool, one grammar at a time."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        response_format["json_schema"] = {**response_format["json_schema"], "schema": {"type": "object"}}
    tools = body.get("tools")
    if isinstance(tools, list):
        unique = {tool["function"]["name"]: tool for tool in reversed(tools)}  # a name once
        body["tools"] = tools = [
            {**tool, "function": {k: v for k, v in tool["function"].items() if k != "parameters"}}
            for tool in reversed(unique.values())
        ]
    names = [tool["function"]["name"] for tool in tools or ()]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("function", {}).get("name") not in names:
        body["tool_choice"] = choice = "auto"
    if not names and choice not in (None, "none", "auto"):
        del body["tool_choice"]
    if names and body.get("tool_choice", "auto") != "none":
        body.pop("response_format", None)
    if body.get("top_logprobs") and not body.get("logprobs"):
        body["logprobs"] = True


def _kept_query_rules(path: str, query: dict[str, Any]) -> dict[str, Any]:
    if path == "/v1/usage" and not _usage_range_allowed(query.get("start"), query.get("end")):
        query.pop("start", None)
        query.pop("end", None)
    if path == "/v1/batches":
        query.pop("after", None)
    return query


def _deadline_allowed(text: str) -> bool:
    try:
        parse_deadline(text, time.time() + 60, MAX_DEADLINE_S - 60)  # a minute's slack either way
    except ValueError:
        return False
    return True


def _usage_range_allowed(start: object, end: object) -> bool:
    """Whether GET /v1/usage takes this range from a team's key (the route's own rules)."""
    now = datetime.now(UTC)
    try:
        end_at = as_utc(_MOMENT.validate_python(end)) if end is not None else now
        start_at = (
            as_utc(_MOMENT.validate_python(start)) if start is not None else now.replace(hour=0, minute=0, second=0)
        )
    except (ValidationError, ValueError):
        return False
    return start_at < end_at and end_at - start_at <= TEAM_MAX_RANGE
