"""The edge's grammar check (contracts/guided_grammar.py): OpenAI's response formats as Lark, the
verdicts llguidance gives (a grammar that does not compile, or accepts no text), cached."""

from __future__ import annotations

import json

import pytest

from contracts.guided_grammar import GrammarChecker, json_object_grammar, json_schema_grammar, regex_grammar


def _nested(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"$ref": "#"}, "the grammar accepts no text"),
        ({"anyOf": [{"$ref": "#"}]}, "the grammar accepts no text"),
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "accepts no text"),
        ({"anyOf": []}, "anyOf is empty"),
        ({"not": {}}, 'Unimplemented keys: ["not"]'),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength (5) is greater than maxLength (2)"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum (5) is greater than maximum (2)"),
        ({"type": "array", "minItems": 5, "maxItems": 2}, "minItems (5) is greater than maxItems (2)"),
        (_nested(200), "recursion limit exceeded"),
    ],
)
def test_a_schema_no_reply_can_follow_is_refused_before_any_server(schema: dict[str, object], reason: str) -> None:
    """Hostile and unsatisfiable schemas: a 400 with the reason at the edge, never a reply that
    ends `stop` with text the schema does not accept (`{"$ref": "#"}` compiles, and a server
    ended its reply at once with an empty `stop`; the first mask finds it)."""
    problem = GrammarChecker().problem(json_schema_grammar(schema))
    assert problem is not None and reason in problem, problem


def test_a_schema_that_outgrows_the_limits_only_mid_reply_passes_the_edge() -> None:
    """A huge repetition count compiles and starts: only generating finds its limit (the engine
    then ends the reply `grammar_failed`, tests/engine/test_grammar.py)."""
    hostile = {"type": "string", "pattern": "^(a|aa|[a-z]{1,50}){500}$"}
    assert GrammarChecker().problem(json_schema_grammar(hostile)) is None


def test_response_formats_become_compact_json_grammars() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    compact = '{"type":"object","properties":{"a":{"type":"integer"}},"x-guidance":{"whitespace_flexible":false}}'
    assert json_schema_grammar(schema) == "start: %json " + compact
    assert json.loads(json_object_grammar().removeprefix("start: %json "))["type"] == "object"
    # A caller's own llguidance options win over the defaults; lenient ignores unknown keywords.
    own = json_schema_grammar({**schema, "x-guidance": {"whitespace_flexible": True}}, lenient=True)
    assert json.loads(own.removeprefix("start: %json "))["x-guidance"] == {"whitespace_flexible": True, "lenient": True}
    assert regex_grammar("a/b") == "start: /a\\/b/"


@pytest.mark.parametrize(
    ("grammar", "reason"),
    [
        (json_schema_grammar({"type": "strin"}), "Invalid type: strin"),
        (json_schema_grammar({"type": "string", "format": "weird"}), "Unknown format: weird"),
        (
            json_schema_grammar({"oneOf": [{"type": "object"}, {"type": "object", "required": ["a"]}]}),
            "oneOf constraints are not supported",
        ),
        (json_schema_grammar({"$ref": "#/$defs/missing"}), "does not exist"),
        (regex_grammar("a("), "unclosed group"),
        ("start: nope", 'unknown name: "nope"'),
    ],
)
def test_bad_grammars_are_refused_with_llguidances_reason(grammar: str, reason: str) -> None:
    problem = GrammarChecker().problem(grammar)
    assert problem is not None and problem.startswith("the grammar does not compile: ") and reason in problem
    assert len(problem) <= 340


def test_verdicts_are_remembered_and_the_time_bound_refuses() -> None:
    checker = GrammarChecker(cache_size=1)
    assert checker.problem(json_object_grammar()) is None
    assert GrammarChecker(max_compile_s=0.0).problem(json_object_grammar()) == (
        "the grammar took 0.0 s to compile, past the bound of 0.0 s"
    )
    assert checker.problem(json_schema_grammar({"type": "strin"})) is not None  # evicts the first
    assert checker.problem(json_object_grammar()) is None
    lenient = json_schema_grammar({"type": "string", "format": "weird"}, lenient=True)
    assert checker.problem(lenient) is None
