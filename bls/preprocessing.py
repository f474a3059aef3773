"""The `preprocessing` model's logic: prompt text -> token ids, stop strings -> id sequences.

`llm` runs the same `Preprocessor` in process for a prompt that arrives as token ids (the
gateway tokenized it already): no BLS call, no second encode of the prompt; only its stop
strings (a few short texts) are encoded, and the ids are checked against the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bls.tensors import (
    InputError,
    Outputs,
    TensorSource,
    bytes_tensor,
    int32_tensor,
    read_int_list,
    read_str,
    read_str_list,
    text_tensor,
)
from bls.tokenizer import PromptTokenizer, StopTokenSequences


@dataclass(frozen=True, slots=True)
class Preprocessed:
    input_ids: tuple[int, ...]
    stop_sequences: StopTokenSequences


class Preprocessor:
    """Tokenize one prompt and its stop strings."""

    def __init__(self, tokenizer: PromptTokenizer) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = tokenizer.vocab_size

    def run(self, text: str, stops: Sequence[str]) -> Preprocessed:
        input_ids = self._tokenizer.encode_prompt(text)
        if not input_ids:
            raise InputError("text_input encodes to no tokens: send a non-empty prompt")
        return Preprocessed(tuple(input_ids), self._tokenizer.encode_stops(stops))

    def run_tokenized(self, input_ids: tuple[int, ...], stops: Sequence[str]) -> Preprocessed:
        """What `run` gives for a prompt its caller has tokenized with this tokenizer (the
        gateway does, for its context check). InputError for ids no encode could give: empty,
        or outside the vocabulary (an engine could embed an id past it, or fail on one)."""
        if not input_ids:
            raise InputError("input_ids must not be empty")
        vocab = self._vocab_size
        if min(input_ids) < 0 or max(input_ids) >= vocab:
            bad = [i for i in input_ids if not 0 <= i < vocab]
            raise InputError(f"input_ids holds ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        return Preprocessed(input_ids, self._tokenizer.encode_stops(stops))

    def execute(self, src: TensorSource) -> Outputs:
        """One `preprocessing` request, tensors in and out (see docs/tensors.md)."""
        return preprocess_outputs(self.run(read_str(src, "text_input"), read_str_list(src, "stop")))


def preprocess_inputs(text: str, stops: Sequence[str]) -> Outputs:
    """The tensors `llm` sends to `preprocessing`."""
    tensors = {"text_input": text_tensor(text)}
    if stops:
        tensors["stop"] = bytes_tensor(stops)
    return tensors


def preprocess_outputs(result: Preprocessed) -> Outputs:
    return {
        "input_ids": int32_tensor(result.input_ids),
        "stop_token_sequences": int32_tensor(result.stop_sequences.flat_ids),
        "stop_token_offsets": int32_tensor(result.stop_sequences.offsets),
    }


def parse_preprocess_outputs(src: TensorSource) -> Preprocessed:
    """Read a `preprocessing` response back (the `llm` side)."""
    return Preprocessed(
        read_int_list(src, "input_ids"),
        StopTokenSequences(read_int_list(src, "stop_token_sequences"), read_int_list(src, "stop_token_offsets")),
    )
