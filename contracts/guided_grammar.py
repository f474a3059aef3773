"""Structured output's grammars, built from what a caller asks and checked at the edge.

    response_format {"type": "json_schema", ...} ─▶ json_schema_grammar(schema) ─┐
    response_format {"type": "json_object"}      ─▶ json_object_grammar()       ├─▶ `guided_grammar`
    a regex                                      ─▶ regex_grammar(pattern)      ┘   (llm input)
                                  GrammarChecker.problem(grammar): None, or the reason for a 400

One form crosses every boundary: a Lark grammar in llguidance's dialect, which embeds JSON schemas
(`%json {...}`) and regexes, and which both engines compile with llguidance (the CPU engine's
engine/grammar.py, TensorRT-LLM's `guided_decoding_backend: llguidance` as its `grammar` guide).
Tool calls are one more Lark rule over the tools' parameter schemas.

JSON is generated compact (`{"a":1}`: no free whitespace), so a model cannot spend its
max_tokens on blank lines, and two servers generate the same tokens for a resumed reply.

The check is the engines' own (engine/grammar_check.py: one definition of llguidance's limits):
it compiles without the model's tokenizer (a grammar's validity does not depend on it) and asks
for the first token's mask, so a grammar that does not compile within the limits, or that
accepts no text at all (`{"$ref": "#"}`), is refused before any server is asked; what passes
here compiles on every server. It runs in a worker thread (llguidance drops the GIL), never on
the event loop, and remembers its verdicts per grammar text.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import llguidance

from engine.grammar_check import MAX_COMPILE_S, GrammarValidator, error_reason

__all__ = [
    "JSON_DEFAULTS",
    "GrammarChecker",
    "error_reason",
    "json_object_grammar",
    "json_schema_grammar",
    "regex_grammar",
]

# JSON compile options every schema gets unless it sets its own (llguidance's `x-guidance`).
JSON_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False}


def json_schema_grammar(schema: Mapping[str, Any], *, lenient: bool = False) -> str:
    """The grammar of JSON documents valid against `schema` (OpenAI's `json_schema`).

    `lenient` ignores keywords llguidance does not implement instead of refusing the schema
    (for `strict: false`); by default such a schema is refused, so a reply never claims a
    constraint it was not held to."""
    options = {**JSON_DEFAULTS, **({"lenient": True} if lenient else {}), **dict(schema.get("x-guidance") or {})}
    return "start: %json " + json.dumps({**schema, "x-guidance": options}, separators=(",", ":"))


def json_object_grammar() -> str:
    """Any JSON object (OpenAI's `json_object`)."""
    return json_schema_grammar({"type": "object"})


def regex_grammar(pattern: str) -> str:
    """Text matching `pattern` in full (Rust regex syntax)."""
    return f"start: /{llguidance.regex_to_lark(pattern, '')}/"


class GrammarChecker:
    """Compile-checks grammars at the edge and remembers each verdict (thread-safe, LRU).

    The gateway makes one at start-up and calls `problem` in a worker thread, e.g.
    `await asyncio.to_thread(checker.problem, grammar)`: None, or the reason for the caller's 400
    ("the grammar does not compile: ...", "the grammar accepts no text: ..." or "... past the
    bound of 2.0 s")."""

    def __init__(self, *, max_compile_s: float = MAX_COMPILE_S, cache_size: int = 1024) -> None:
        self._validator = GrammarValidator(max_compile_s=max_compile_s)
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._verdicts: OrderedDict[str, str | None] = OrderedDict()

    def known(self, grammar: str) -> tuple[str | None] | None:
        """The verdict on `grammar` when it was checked before (a 1-tuple: the problem or None),
        without compiling; None when it was not. Cheap: callers try it on the event loop."""
        with self._lock:
            if grammar in self._verdicts:
                self._verdicts.move_to_end(grammar)
                return (self._verdicts[grammar],)
        return None

    def problem(self, grammar: str) -> str | None:
        """What is wrong with `grammar`, in llguidance's words; None when a reply can follow it."""
        with self._lock:
            if grammar in self._verdicts:
                self._verdicts.move_to_end(grammar)
                return self._verdicts[grammar]
        verdict = self._validator.problem(grammar)
        with self._lock:
            self._verdicts[grammar] = verdict
            while len(self._verdicts) > self._cache_size:
                self._verdicts.popitem(last=False)
        return verdict
