from __future__ import annotations

from collections.abc import Sequence

import pytest

from bls.detokenizer import REPLACEMENT_CHAR, DetokenizerState, IncrementalDetokenizer
from bls.tokenizer import PromptTokenizer

TEXT = "Hello 🚀 world, 你好 tokens! Observation: é"


def stream(detok: IncrementalDetokenizer, ids: Sequence[int], chunks: Sequence[int]) -> list[str]:
    """Feed `ids` in chunks of the given sizes (the last call final); return the deltas."""
    deltas, state, end = [], DetokenizerState(), 0
    for size in chunks:
        end += size
        delta = detok.step(ids[:end], state, is_final=end >= len(ids))
        deltas.append(delta.text)
        state = delta.state
    return deltas


def test_multibyte_characters_are_split_over_several_tokens(tokenizer: PromptTokenizer) -> None:
    ids = tokenizer.encode_stop("🚀")
    assert len(ids) > 1  # the premise of the tests below
    assert tokenizer.decode(ids[:1]).endswith(REPLACEMENT_CHAR)


def test_token_by_token_never_emits_a_split_character(tokenizer: PromptTokenizer) -> None:
    ids = tokenizer.encode_stop(TEXT)
    deltas = stream(IncrementalDetokenizer(tokenizer.decode), ids, [1] * len(ids))
    assert "".join(deltas) == TEXT
    assert all(REPLACEMENT_CHAR not in d for d in deltas)
    assert "" in deltas  # some tokens were held until their character completed


@pytest.mark.parametrize("chunks", [[2, 3, 5, 100], [7, 1, 1, 1, 100], [100]])
def test_any_chunking_concatenates_to_the_whole_text(tokenizer: PromptTokenizer, chunks: list[int]) -> None:
    ids = tokenizer.encode_stop(TEXT)
    deltas = stream(IncrementalDetokenizer(tokenizer.decode), ids, chunks)
    assert "".join(deltas) == TEXT
    assert all(REPLACEMENT_CHAR not in d for d in deltas)


def test_a_chunk_ending_mid_character_emits_the_complete_part(tokenizer: PromptTokenizer) -> None:
    head = tokenizer.encode_stop("Hello ")
    rocket = tokenizer.encode_stop("🚀")
    detok = IncrementalDetokenizer(tokenizer.decode)
    delta = detok.step([*head, rocket[0]], DetokenizerState(), is_final=False)
    assert delta.text == "Hello "
    assert delta.state.read_offset == len(head)
    rest = detok.step([*head, *rocket], delta.state, is_final=False)
    assert rest.text == "🚀"


def test_final_flushes_an_incomplete_tail(tokenizer: PromptTokenizer) -> None:
    ids = tokenizer.encode_stop("ok 🚀")[:-1]  # the reply ended mid-character
    detok = IncrementalDetokenizer(tokenizer.decode)
    held = detok.step(ids, DetokenizerState(), is_final=False)
    assert held.text == "ok "
    final = detok.step(ids, held.state, is_final=True)
    assert final.text.endswith(REPLACEMENT_CHAR)
    assert final.state.read_offset == len(ids)


def test_special_tokens_add_no_text(tokenizer: PromptTokenizer) -> None:
    ids = [*tokenizer.encode_stop("Hello"), 2]  # ... then </s>
    deltas = stream(IncrementalDetokenizer(tokenizer.decode), ids, [1] * len(ids))
    assert "".join(deltas) == "Hello"


def test_bad_state_is_rejected(tokenizer: PromptTokenizer) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        IncrementalDetokenizer(tokenizer.decode).step([5], DetokenizerState(0, 3), is_final=False)
