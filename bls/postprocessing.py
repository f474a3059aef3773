"""The `postprocessing` model's logic: completion token ids -> text delta, with stop strings.

Stateless by design (docs/tensors.md): the caller (`llm`) carries the detokenizer offsets and
the held-back text from one call to the next, so any instance can serve any call and a resumed
reply can be primed by replaying the tokens the client already has.

When a stop string ends the reply, the engine has usually written more tokens than the reply
has (it merges steps while we read, and stops only when our cancel lands). The reply keeps its
tokens up to and including the one in which the stop string *ends* (`reply_tokens`); the rest
are discarded work, metered apart and never billed as completion:

    stop "Observation:"
    tokens   | "The" | " answer." | " Obs" | "erv" | "ation: x" | " y" | " z" |
    text      "The answer. " ─────────────┘ (cut before the stop)
    reply    └───────────── 5 tokens (through the stop's end) ───┘ └ discarded: 2 ┘

That count depends only on the token ids, never on how the engine happened to batch them,
and every token id sent before the stop was seen is within it (a stop is seen as soon as its
last character is decoded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bls.detokenizer import DetokenizerState, IncrementalDetokenizer
from bls.stop_strings import scan_stop_strings
from bls.tensors import (
    Outputs,
    TensorSource,
    bool_scalar,
    bytes_tensor,
    int32_scalar,
    int32_tensor,
    read_bool,
    read_int,
    read_int_list,
    read_str,
    read_str_list,
    text_tensor,
)
from bls.tokenizer import PromptTokenizer


@dataclass(frozen=True, slots=True)
class PostprocessState:
    """Everything one reply's postprocessing remembers between calls."""

    detokenizer: DetokenizerState = field(default_factory=DetokenizerState)
    held_text: str = ""


@dataclass(frozen=True, slots=True)
class PostprocessResult:
    text: str  # safe to emit now
    state: PostprocessState
    stop_hit: bool  # a stop string was found; `text` ends before it
    # How many of the call's `token_ids` belong to the reply: all of them, or with `stop_hit`
    # those up to and including the token in which the stop string ends.
    reply_tokens: int


class Postprocessor:
    """Detokenize incrementally, then cut at stop strings."""

    def __init__(self, tokenizer: PromptTokenizer) -> None:
        self._decode = tokenizer.decode
        self._detokenizer = IncrementalDetokenizer(tokenizer.decode)

    def step(
        self, token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
    ) -> PostprocessResult:
        delta = self._detokenizer.step(token_ids, state.detokenizer, is_final=is_final)
        scan = scan_stop_strings(state.held_text, delta.text, stops, is_final=is_final)
        reply_tokens = len(token_ids)
        if scan.stop_hit:
            through = len(state.held_text) + len(delta.text) - scan.after_stop
            reply_tokens = tokens_through_stop(self._decode, token_ids, state, delta.state, through)
        return PostprocessResult(scan.emit, PostprocessState(delta.state, scan.held), scan.stop_hit, reply_tokens)

    def execute(self, src: TensorSource) -> Outputs:
        """One `postprocessing` request, tensors in and out (see docs/tensors.md)."""
        state = PostprocessState(
            DetokenizerState(read_int(src, "prefix_offset", 0), read_int(src, "read_offset", 0)),
            read_str(src, "held_text", ""),
        )
        result = self.step(
            read_int_list(src, "token_ids"),
            state,
            read_str_list(src, "stop"),
            is_final=read_bool(src, "is_final", False),
        )
        return postprocess_outputs(result)


def tokens_through_stop(
    decode: Callable[[Sequence[int]], str],
    token_ids: Sequence[int],
    before: PostprocessState,
    after: DetokenizerState,
    through: int,
) -> int:
    """How many leading `token_ids` it takes for this step's text to reach `through` characters
    of `held_text + delta` (the stop string's end): the token that character is in, included.

    Decoded the way the detokenizer decoded the step (from `prefix_offset`), one more token at
    a time over this step's new tokens only: a few short decodes, once per reply a stop ends."""
    prefix, read = before.detokenizer.prefix_offset, before.detokenizer.read_offset
    prefix_chars = len(decode(token_ids[prefix:read]))
    for end in range(read + 1, after.read_offset):
        if len(before.held_text) + len(decode(token_ids[prefix:end])) - prefix_chars >= through:
            return end
    return after.read_offset


# --- the tensor contract, both directions ----------------------------------------------------


def postprocess_inputs(
    token_ids: Sequence[int], state: PostprocessState, stops: Sequence[str], *, is_final: bool
) -> Outputs:
    """The tensors `llm` sends to `postprocessing`."""
    tensors = {
        "token_ids": int32_tensor(token_ids),
        "prefix_offset": int32_scalar(state.detokenizer.prefix_offset),
        "read_offset": int32_scalar(state.detokenizer.read_offset),
        "held_text": text_tensor(state.held_text),
        "is_final": bool_scalar(is_final),
    }
    if stops:
        tensors["stop"] = bytes_tensor(stops)
    return tensors


def postprocess_outputs(result: PostprocessResult) -> Outputs:
    """The tensors `postprocessing` answers with."""
    return {
        "text_output": text_tensor(result.text),
        "prefix_offset": int32_scalar(result.state.detokenizer.prefix_offset),
        "read_offset": int32_scalar(result.state.detokenizer.read_offset),
        "held_text": text_tensor(result.state.held_text),
        "stop_hit": bool_scalar(result.stop_hit),
        "reply_tokens": int32_scalar(result.reply_tokens),
    }


def parse_postprocess_outputs(src: TensorSource) -> PostprocessResult:
    """Read a `postprocessing` response back into a result (the `llm` side)."""
    state = PostprocessState(
        DetokenizerState(read_int(src, "prefix_offset"), read_int(src, "read_offset")),
        read_str(src, "held_text"),
    )
    return PostprocessResult(
        read_str(src, "text_output"), state, read_bool(src, "stop_hit", False), read_int(src, "reply_tokens")
    )
