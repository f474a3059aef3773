"""Structured output's grammars, built from what a caller asks and checked at the edge.

    response_format {"type": "json_schema", ...} ─▶ json_schema_grammar(schema) ─┐
    response_format {"type": "json_object"}      ─▶ json_object_grammar()       ├─▶ `guided_grammar`
    a regex                                      ─▶ regex_grammar(pattern)      ┘   (llm input)
                                  GrammarChecker.problem(grammar): None, or llguidance's reason (a 400)

One form crosses every boundary: a Lark grammar in llguidance's dialect, which embeds JSON schemas
(`%json {...}`) and regexes, and which both engines compile with llguidance (the CPU engine's
engine/grammar.py, TensorRT-LLM's `guided_decoding_backend: llguidance` as its `grammar` guide).
Tool calls are one more Lark rule over the tools' parameter schemas.

JSON is generated compact (`{"a":1}`: no free whitespace), so a model cannot spend its
max_tokens on blank lines, and two servers generate the same tokens for a resumed reply.

The check compiles without a tokenizer (the gateway has the model's, but a grammar's validity
does not depend on it) under the engines' own limits, so what passes here compiles on every
server; it runs in a worker thread (llguidance drops the GIL), never on the event loop, and
remembers its verdicts per grammar text.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import llguidance

# The engines' limits (engine/grammar.py; tests/contracts/test_guided_grammar.py holds them equal).
INITIAL_LEXER_FUEL = 1_000_000
STEP_LEXER_FUEL = 200_000
MAX_GRAMMAR_SIZE = 500_000
MAX_COMPILE_S = 2.0
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


def parser_limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(
        initial_lexer_fuel=INITIAL_LEXER_FUEL,
        step_lexer_fuel=STEP_LEXER_FUEL,
        max_grammar_size=MAX_GRAMMAR_SIZE,
        verbose_errors=False,
    )


def error_reason(message: str) -> str:
    """llguidance's error without the source it quotes (its indented lines), at most 300 chars."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line[0].isspace()]
    reason = " ".join(lines) or "the grammar does not compile"
    return reason if len(reason) <= 300 else reason[:297] + "..."


class GrammarChecker:
    """Compile-checks grammars at the edge and remembers each verdict (thread-safe, LRU).

    The gateway makes one at start-up and calls `problem` in a worker thread, e.g.
    `await asyncio.to_thread(checker.problem, grammar)`: None, or the reason for the caller's 400
    ("the grammar does not compile: ..." or "... past the bound of 2.0 s")."""

    def __init__(self, *, max_compile_s: float = MAX_COMPILE_S, cache_size: int = 1024) -> None:
        self._max_compile_s = max_compile_s
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
        """What is wrong with `grammar`, in llguidance's words; None when it compiles."""
        with self._lock:
            if grammar in self._verdicts:
                self._verdicts.move_to_end(grammar)
                return self._verdicts[grammar]
        verdict = self._check(grammar)
        with self._lock:
            self._verdicts[grammar] = verdict
            while len(self._verdicts) > self._cache_size:
                self._verdicts.popitem(last=False)
        return verdict

    def _check(self, grammar: str) -> str | None:
        started = time.perf_counter()
        message = llguidance.LLMatcher.validate_grammar(grammar, None, limits=parser_limits())
        elapsed = time.perf_counter() - started
        if message:
            return f"the grammar does not compile: {error_reason(message)}"
        if elapsed > self._max_compile_s:
            return f"the grammar took {elapsed:.1f} s to compile, past the bound of {self._max_compile_s} s"
        return None
