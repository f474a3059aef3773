"""Incremental detokenization: text deltas from a growing list of token ids.

Decoding each new token alone is wrong in two ways: many tokenizers merge or strip spaces
depending on neighbours, and a byte-level tokenizer can split one UTF-8 character over several
tokens, each of which decodes to U+FFFD on its own. So, like vLLM and TGI, keep two offsets
into the completion's token ids and decode a small window:

    token_ids:  .... | prefix_offset ..... read_offset | ..... new tokens ..... |
                       already emitted,                  not emitted yet
                       decoded as context

    prefix_text = decode(ids[prefix_offset:read_offset])
    new_text    = decode(ids[prefix_offset:])
    delta       = new_text[len(prefix_text):]

A delta that ends in U+FFFD ends in a partial character (or in bytes that are no character
at all, which a small model writes now and then): emit only up to the last token at which the
text is complete, and keep the rest for the next call. On the final call everything is
emitted, because an incomplete sequence that the reply ends with will never complete.

Where the text last was complete is looked for over every token of the step, up to
SEARCH_TOKENS back (and over all of them before anything was emitted). So the state after a
step depends only on the token ids, not on how the engine chunked them (for chunks up to
SEARCH_TOKENS), and a resumed reply primed by replaying the client's tokens in one call from
(0, 0) reaches the state the previous server was in: read_offset at the last complete end.
Looking back only three tokens (the most one split character spans), a reply cut after a run
of four incomplete tokens primed to (0, 0), and the next step sent the client its whole text
again (`tests/integration/test_failover_e2e.py`, once in a CI run).

The state is two integers, so the stateless `postprocessing` model can hand it back to its
caller, and a resumed reply can be primed by replaying the tokens already sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

REPLACEMENT_CHAR = "\ufffd"
# How far back a step looks for the last complete end (module docstring): more than the
# engine's largest chunk, few enough that a run of bytes that never complete stays cheap.
SEARCH_TOKENS = 64


@dataclass(frozen=True, slots=True)
class DetokenizerState:
    """Offsets into the completion token ids; (0, 0) before the first call."""

    prefix_offset: int = 0
    read_offset: int = 0


@dataclass(frozen=True, slots=True)
class DetokenizedDelta:
    text: str
    state: DetokenizerState


class IncrementalDetokenizer:
    """Turns "all completion tokens so far" plus a state into the next text delta."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode

    def step(self, token_ids: Sequence[int], state: DetokenizerState, *, is_final: bool) -> DetokenizedDelta:
        """The text that `token_ids[state.read_offset:]` add, and the state for the next call."""
        prefix, read = state.prefix_offset, state.read_offset
        if not 0 <= prefix <= read <= len(token_ids):
            raise ValueError(
                f"detokenizer state (prefix_offset={prefix}, read_offset={read}) does not fit {len(token_ids)} tokens"
            )
        if read == len(token_ids):
            return DetokenizedDelta("", state)
        prefix_text = self._decode(token_ids[prefix:read])
        if is_final:
            # Everything goes out: an incomplete character the reply ends with never completes.
            new_text = self._decode(token_ids[prefix:])
            return DetokenizedDelta(new_text[len(prefix_text) :], DetokenizerState(read, len(token_ids)))
        lowest = read + 1 if read == 0 else max(read + 1, len(token_ids) - SEARCH_TOKENS)
        for end in range(len(token_ids), lowest - 1, -1):
            new_text = self._decode(token_ids[prefix:end])
            if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT_CHAR):
                return DetokenizedDelta(new_text[len(prefix_text) :], DetokenizerState(read, end))
        # Nothing complete yet (a partial character, or only special tokens): wait for more.
        return DetokenizedDelta("", state)
