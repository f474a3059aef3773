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


def _with_runs_of_bytes_that_never_complete(tokenizer: PromptTokenizer) -> list[int]:
    """A reply the way a small model writes one: text, then runs of lone leading bytes (each
    decodes to U+FFFD, with or without what follows), then text again."""
    lone = tokenizer.encode_stop("🚀")[0]
    return [
        *tokenizer.encode_stop("Hello "), *[lone] * 6, *tokenizer.encode_stop("mid 你好"),
        *[lone] * 2, *tokenizer.encode_stop(" and 🚀 end"),
    ]  # fmt: skip


def test_a_reply_cut_after_a_run_of_incomplete_tokens_resumes_without_repeating_itself(
    tokenizer: PromptTokenizer,
) -> None:
    """A failover primes the next server by replaying the client's tokens in one call from
    (0, 0). After a run of four tokens that never complete, a three-token look-back primed to
    (0, 0) and the next step sent the client its whole text again."""
    ids = _with_runs_of_bytes_that_never_complete(tokenizer)
    detok = IncrementalDetokenizer(tokenizer.decode)
    cut = len(tokenizer.encode_stop("Hello ")) + 5  # inside the run of six
    primed = detok.step(ids[:cut], DetokenizerState(), is_final=False)
    assert primed.text == "Hello "
    assert primed.state.read_offset == len(tokenizer.encode_stop("Hello "))
    rest = detok.step(ids, primed.state, is_final=True)
    assert primed.text + rest.text == tokenizer.decode(ids)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_priming_at_any_cut_reaches_the_state_the_streaming_server_had(tokenizer: PromptTokenizer, chunk: int) -> None:
    """Whatever the engine's chunks (up to SEARCH_TOKENS), the state a server streamed to after
    `cut` tokens is the state priming `cut` tokens from (0, 0) gives, so a reply resumed there
    sends the client exactly the text it had not yet had."""
    ids = _with_runs_of_bytes_that_never_complete(tokenizer)
    detok = IncrementalDetokenizer(tokenizer.decode)
    whole = tokenizer.decode(ids)
    sent, state = "", DetokenizerState()
    for cut in range(chunk, len(ids), chunk):
        delta = detok.step(ids[:cut], state, is_final=False)
        sent, state = sent + delta.text, delta.state
        primed = detok.step(ids[:cut], DetokenizerState(), is_final=False)
        assert primed.state.read_offset == state.read_offset, f"cut at {cut}"
        resumed = detok.step(ids, primed.state, is_final=True)
        assert sent + resumed.text == whole, f"cut at {cut}"


@pytest.mark.parametrize("chunk", [1, 22])
def test_the_cost_of_a_step_does_not_grow_with_the_reply(tokenizer: PromptTokenizer, chunk: int) -> None:
    # Issue 41: what a token costs to detokenize is bounded by the window, never the reply so far.
    # Counted in tokens handed to `decode` (its cost), not timed: 2,000 tokens one step at a time.
    ids = tokenizer.encode_stop(" ".join(f"word{i} 你好 🚀" for i in range(400)))[:2000]
    assert len(ids) == 2000
    decoded: list[int] = []

    def decode(token_ids: Sequence[int]) -> str:
        decoded.append(len(token_ids))
        return tokenizer.decode(token_ids)

    detok, state, per_step = IncrementalDetokenizer(decode), DetokenizerState(), []
    for end in [*range(chunk, len(ids), chunk), len(ids)]:
        before = len(decoded)
        state = detok.step(ids[:end], state, is_final=end == len(ids)).state
        per_step.append(sum(decoded[before:]))
    assert state.read_offset == len(ids)
    early, late = per_step[5:25], per_step[-21:-1]
    assert sum(late) <= 1.5 * sum(early)  # the same window at token 2,000 as at token 100
    # At most a decode per token of the step (looking back for a complete character), each of
    # the step's tokens and the previous one's window: bounded by the step, not the reply.
    assert max(per_step) <= (chunk + 8) * (chunk + 2)
