"""The edge's grammar check (contracts/guided_grammar.py): OpenAI's response formats as Lark, the
verdicts llguidance gives, cached, and the same limits as the engines' compiler."""

from __future__ import annotations

import json

import pytest

from contracts import guided_grammar
from contracts.guided_grammar import GrammarChecker, json_object_grammar, json_schema_grammar, regex_grammar
from engine import grammar as engine_grammar


def test_the_edge_checks_with_the_engines_limits() -> None:
    """What passes here compiles on every server: the same fuel, size and time bounds."""
    for name in ("INITIAL_LEXER_FUEL", "STEP_LEXER_FUEL", "MAX_GRAMMAR_SIZE", "MAX_COMPILE_S"):
        assert getattr(guided_grammar, name) == getattr(engine_grammar, name), name


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
