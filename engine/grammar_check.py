"""What every grammar is held to, in one place: llguidance's limits, and the check that a grammar
compiles under them and that a reply can start under it, made without a model's tokenizer.

    grammar (Lark) ─▶ GrammarValidator.problem ─▶ None, or the reason for the caller's 400:
                        compile under parser_limits()      "the grammar does not compile: ..."
                        first mask (a byte vocabulary)     "the grammar accepts no text ..."
                        both within MAX_COMPILE_S          "... past the bound of 2.0 s"

Who uses it: the gateway's edge check (contracts/guided_grammar.py, a 400 before any server is
asked), the TensorRT-LLM path before it hands a grammar to TensorRT-LLM's own llguidance, and
the CPU engine's compiler (engine/grammar.py), which compiles for the model's vocabulary under
the same limits. One definition, so what passes the edge compiles on every server.

Why a first mask: a grammar can compile and still describe no text at all (`{"$ref": "#"}` is a
rule that only expands to itself); llguidance finds that out only when asked for the first
token's mask, and then allows nothing but the end-of-sequence token, so a reply would end at
once with an empty "stop". A byte vocabulary asks the same question without a model: a text
that can start with some byte can start with some token of any byte-complete tokenizer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np
import numpy.typing as npt

# llguidance's resource limits, at their documented defaults but for the lexer's start-up fuel
# (~50k per ms): a grammar that needs more is refused instead of stalling a server.
INITIAL_LEXER_FUEL = 1_000_000
STEP_LEXER_FUEL = 200_000
MAX_GRAMMAR_SIZE = 500_000
# A compile (and its first mask) that takes longer than this is refused, whatever the fuel said.
MAX_COMPILE_S = 2.0
# What llguidance reports when no token can extend the text (at the start: the grammar is empty).
_NOTHING_ALLOWED = "NoExtensionBias"


def parser_limits() -> llguidance.LLParserLimits:
    """The limits every compile runs under; errors name the grammar's line, not the parser's state."""
    return llguidance.LLParserLimits(
        initial_lexer_fuel=INITIAL_LEXER_FUEL,
        step_lexer_fuel=STEP_LEXER_FUEL,
        max_grammar_size=MAX_GRAMMAR_SIZE,
        verbose_errors=False,
    )


def error_reason(message: str) -> str:
    """llguidance's error without the source it quotes (indented lines: the grammar's line and
    a caret, which for a schema on one line is the whole schema), at most 300 characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line[0].isspace()]
    lines = [line for line in lines if line != "<non-verbose/>"]
    reason = " ".join(lines) or "the grammar does not compile"
    return reason if len(reason) <= 300 else reason[:297] + "..."


def start_problem(matcher: llguidance.LLMatcher, vocab_size: int) -> str | None:
    """Why no reply can start from `matcher`'s state (computing its next mask); None when one can.
    The matcher is spent afterwards when it had a problem: pass a copy."""
    bitmask = llg_numpy.allocate_token_bitmask(1, vocab_size)
    llg_numpy.fill_next_token_bitmask(matcher, bitmask, 0)
    return matcher_failure(matcher, bitmask[0])


def matcher_failure(matcher: llguidance.LLMatcher, mask_row: npt.NDArray[np.int32]) -> str | None:
    """Why the text under `matcher` cannot go on, given the mask row just filled from it: the
    matcher's error (a limit it ran into), or a mask that allows no token; None when it can.
    (A matcher in error allows only the end-of-sequence token: never take that end as STOP.)"""
    if matcher.is_error():
        return _in_words(matcher.get_error())
    if not mask_row.any():
        return _in_words(_NOTHING_ALLOWED)
    return None


def _in_words(error: str) -> str:
    """A matcher's error in the caller's words: an empty grammar, or a limit it ran into."""
    reason = error_reason(error)
    if reason == _NOTHING_ALLOWED:
        return (
            "the grammar accepts no text: no reply can start under it (a schema that only "
            'refers to itself, such as {"$ref": "#"}, describes no value)'
        )
    return f"the grammar cannot be followed within llguidance's limits: {reason}"


class _ByteVocabulary:
    """A tokenizer of the 256 bytes and an end token, in the shape llguidance wraps."""

    eos_token_id = 256
    bos_token_id = None
    tokens: Sequence[bytes] = [bytes([b]) for b in range(256)] + [b"</s>"]
    special_token_ids: Sequence[int] = [256]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


class GrammarValidator:
    """Checks grammars without a model: they compile under `parser_limits()`, a reply can start
    under them, and both within `max_compile_s`. Thread-safe (llguidance drops the GIL while
    it compiles; each check has its own matcher)."""

    def __init__(self, *, max_compile_s: float = MAX_COMPILE_S) -> None:
        self._max_compile_s = max_compile_s
        self._bytes = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()))

    def problem(self, grammar: str) -> str | None:
        """What is wrong with `grammar`, in llguidance's words; None when a reply can follow it."""
        started = time.perf_counter()
        matcher = llguidance.LLMatcher(self._bytes, grammar, log_level=0, limits=parser_limits())
        if matcher.is_error():
            return f"the grammar does not compile: {error_reason(matcher.get_error())}"
        problem = start_problem(matcher, self._bytes.vocab_size)
        elapsed = time.perf_counter() - started
        if problem is not None:
            return problem
        if elapsed > self._max_compile_s:
            return f"the grammar took {elapsed:.1f} s to compile, past the bound of {self._max_compile_s} s"
        return None
