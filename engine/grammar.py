"""Grammar-constrained decoding with llguidance: compile once per grammar, mask per step.

    request.sampling.grammar (Lark text) ──compile──▶ CompiledGrammar (cached per text)
                                                         │ matcher() per sequence, advanced
                                                         ▼ over resumed tokens first
    step: fill_masks(matchers) ─▶ bitmask [n, vocab/32] ─▶ apply_masks: forbidden logits = -inf
          sampled token ─▶ matcher.consume_token; matcher.is_stopped() ─▶ the reply ends (STOP)
          a matcher in error (a limit hit mid-reply) ─▶ the reply ends (GRAMMAR_FAILED)

A reply ends STOP only when its text is complete under its grammar: the matcher stopped after
a token it accepted, or it accepted the end-of-sequence token (llguidance allows that token
only where the text is complete). A matcher that gives up, a limit hit as the reply grows
(`lexer error: too many expressions constructed`), allows nothing but the end-of-sequence
token from then on, so an engine that took that token as a normal end would call a cut text
complete: `matcher_failure` tells the two apart.

Why llguidance: it computes a sequence's mask on the CPU in tens of microseconds straight into
a numpy bitmask (no torch), takes the checkpoint's own tokenizer.json, compiles JSON schemas
lazily (no per-schema ahead-of-time automaton over the vocabulary, so compile is milliseconds),
and it is one of the two backends the pinned TensorRT-LLM accepts (`guided_decoding_backend:
llguidance`), so the GPU path runs the very same grammar.

One grammar form crosses every boundary: Lark in llguidance's dialect, which embeds JSON
schemas (`start: %json {...}`) and regexes (`start: /.../`); contracts/guided_grammar.py builds
it from OpenAI's `response_format`. Compilation is bounded by llguidance's fuel limits
(deterministic: the same grammar compiles, or fails, on every server) and by a wall-clock bound,
the same ones the gateway's edge checks with (engine/grammar_check.py).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np
import numpy.typing as npt

from engine.grammar_check import MAX_COMPILE_S, error_reason, parser_limits, start_problem

_CACHE_SIZE = 256


class GrammarError(ValueError):
    """A grammar llguidance cannot compile (the reason is its own), or one past the bounds."""


class CompiledGrammar:
    """A compiled grammar: a fresh matcher whose copies start every sequence that uses it."""

    def __init__(self, template: llguidance.LLMatcher) -> None:
        self._template = template
        self._lock = threading.Lock()

    def matcher(self) -> llguidance.LLMatcher:
        """A matcher at the grammar's start, for one sequence (a copy: cheap)."""
        with self._lock:
            return self._template.deep_copy()


class GrammarCompiler:
    """Compiles grammars for one model's tokenizer, caches them, and masks batches of logits.

    Thread-safe: `compile` runs on whatever thread validates a request (llguidance drops the
    GIL while it compiles), the masks on the engine's step thread.
    """

    def __init__(self, tokenizer: llguidance.LLTokenizer, *, max_compile_s: float = MAX_COMPILE_S) -> None:
        self._tokenizer = tokenizer
        self._max_compile_s = max_compile_s
        self._lock = threading.Lock()
        # Grammar text -> its compiled form or the error it failed with (a bad schema sent
        # again is refused without compiling it again).
        self._cache: OrderedDict[str, CompiledGrammar | GrammarError] = OrderedDict()
        self._executor = llguidance.LLExecutor()
        self._bitmask = llg_numpy.allocate_token_bitmask(1, tokenizer.vocab_size)

    @classmethod
    def from_model_dir(cls, model_dir: Path, vocab_size: int, eos_token_id: int | None) -> GrammarCompiler | None:
        """For the checkpoint in `model_dir` (its tokenizer.json); None when it has none."""
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            return None
        return cls.from_tokenizer_json(path.read_text(encoding="utf-8"), vocab_size, eos_token_id)

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: str, vocab_size: int, eos_token_id: int | None) -> GrammarCompiler:
        """From a HF `tokenizers` tokenizer.json; the mask spans the model's `vocab_size` (ids
        past the tokenizer's are never allowed)."""
        return cls(llguidance.LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=eos_token_id))

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.vocab_size)

    def compile(self, grammar: str) -> CompiledGrammar:
        """The compiled `grammar`; GrammarError with llguidance's reason when it cannot be."""
        with self._lock:
            cached = self._cache.get(grammar)
            if cached is not None:
                self._cache.move_to_end(grammar)
        if cached is None:
            cached = self._compile(grammar)
            with self._lock:
                self._cache[grammar] = cached
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        if isinstance(cached, GrammarError):
            raise cached
        return cached

    def _compile(self, grammar: str) -> CompiledGrammar | GrammarError:
        started = time.perf_counter()
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0, limits=parser_limits())
        if matcher.is_error():
            return GrammarError(f"the grammar does not compile: {error_reason(matcher.get_error())}")
        problem = start_problem(matcher.deep_copy(), self.vocab_size)
        elapsed = time.perf_counter() - started
        if problem is not None:
            return GrammarError(problem)
        if elapsed > self._max_compile_s:
            bound = self._max_compile_s
            return GrammarError(f"the grammar took {elapsed:.1f} s to compile, past the bound of {bound} s")
        return CompiledGrammar(matcher)

    def matcher_after(self, grammar: str, token_ids: Sequence[int]) -> llguidance.LLMatcher:
        """A matcher for `grammar` advanced over `token_ids` (a resumed reply's tokens), so the
        next token is masked exactly as on the server that wrote them. ValueError when the
        tokens do not follow the grammar."""
        matcher = self.compile(grammar).matcher()
        if token_ids and not matcher.consume_tokens(list(token_ids)):
            raise ValueError(f"the resumed tokens do not follow the grammar: {error_reason(matcher.get_error())}")
        return matcher

    def completes(self, grammar: str, token_ids: Sequence[int]) -> bool:
        """Whether `token_ids` (a whole reply, a trailing end-of-sequence token allowed) are a
        text complete under `grammar`: for a path whose own matcher says nothing of how it ended
        (TensorRT-LLM's ends a reply `stop` when its matcher gave up, as ours would)."""
        try:
            matcher = self.matcher_after(grammar, token_ids)
        except ValueError:  # GrammarError too: it cannot be compiled here, so it is not shown complete
            return False
        return matcher.is_accepting() and not matcher.is_error()

    def next_token_problem(self, grammar: str, token_ids: Sequence[int]) -> str | None:
        """Why no token can follow `token_ids` under `grammar` (a limit the grammar's shared
        lexer ran into on an earlier reply, say); None when one can. Raises as `matcher_after`.
        Costs one mask: for validating a request, off the step thread."""
        return start_problem(self.matcher_after(grammar, token_ids), self.vocab_size)

    def fill_masks(self, matchers: Sequence[llguidance.LLMatcher]) -> npt.NDArray[np.int32]:
        """Each matcher's allowed tokens as a bitmask row [len(matchers), ceil(vocab / 32)]
        (bit i of word w allows token 32 w + i), computed in parallel outside the GIL."""
        if self._bitmask.shape[0] < len(matchers):
            self._bitmask = llg_numpy.allocate_token_bitmask(len(matchers), self.vocab_size)
        bitmask = self._bitmask[: len(matchers)]
        if len(matchers) == 1:
            llg_numpy.fill_next_token_bitmask(matchers[0], bitmask, 0)
        else:
            llg_numpy.fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)], bitmask)
        return bitmask


def apply_masks(logits: npt.NDArray[np.float32], rows: Sequence[int], bitmask: npt.NDArray[np.int32]) -> None:
    """Set the forbidden logits of `logits[rows[i]]` to -inf, as `bitmask[i]` says, in place."""
    vocab = logits.shape[1]
    # Inverted first, so the unpacked bits are the forbidden tokens: one pass, no negation copy.
    forbidden = np.unpackbits((~bitmask).view(np.uint8), axis=1, bitorder="little")[:, :vocab].view(np.bool_)
    for i, row in enumerate(rows):
        np.copyto(logits[row], -np.inf, where=forbidden[i])
