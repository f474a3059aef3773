"""A prompt's size before its tokens: what cannot fit by its bytes is refused untokenized, the
bound is exact for a byte-level vocab, and tokenizing a long prompt leaves the event loop free."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from contracts.catalog import ServedModel, longest_token_bytes
from contracts.errors import ApiError
from contracts.prompt_context import check_prompt_bytes, encode_prompt


@dataclass(frozen=True, slots=True)
class CountingModel(ServedModel):
    """A served model that records each text it tokenizes."""

    encoded: list[int] = field(default_factory=list)

    def encode_prompt(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        return ServedModel.encode_prompt(self, text)


@pytest.fixture(scope="module")
def byte_level() -> Tokenizer:
    return train_tokenizer(generate_corpus(5, 300), 400)


def test_a_byte_level_token_stands_for_as_many_bytes_as_it_has_characters(byte_level: Tokenizer) -> None:
    longest = longest_token_bytes(byte_level)
    assert longest == max(len(token) for token in byte_level.get_vocab())  # one character a byte
    text = " ".join(generate_corpus(2, 300)) + " héllo wörld — ☃ 日本語 " * 20
    encoding = byte_level.encode(text, add_special_tokens=False)
    covered = [len(text[start:end].encode()) for start, end in encoding.offsets]
    assert max(covered) <= longest
    assert sum(covered) >= len(text.encode())  # every byte is in some token


def test_any_other_vocab_counts_its_tokens_in_utf8_bytes() -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["héllo héllo wörld"], trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    assert longest_token_bytes(tokenizer) == max(len(token.encode()) for token in tokenizer.get_vocab())


def test_a_prompt_too_long_in_bytes_is_refused_untokenized(byte_level: Tokenizer) -> None:
    model = CountingModel("m", 64, byte_level)
    limit = 64 * longest_token_bytes(byte_level)
    assert model.max_prompt_bytes == limit
    check_prompt_bytes(model, "é" * (limit // 2))  # exactly the limit in bytes: may fit
    with pytest.raises(ApiError) as refused:
        asyncio.run(encode_prompt(model, "é" * (limit // 2) + "x"))
    assert (refused.value.status_code, refused.value.code, refused.value.param) == (
        400,
        "context_length_exceeded",
        "prompt",
    )
    assert f"prompt is {limit + 1} bytes" in refused.value.message
    assert model.encoded == []


async def test_tokenizing_a_maximum_size_prompt_leaves_the_event_loop_free(byte_level: Tokenizer) -> None:
    """The largest prompt that passes the size rule, tokenized while the loop ticks every
    millisecond: the loop's longest pause is a small part of the tokenizing time (holding the
    GIL, as `Tokenizer.encode` does, the pause was the whole of it)."""
    context = 120_000
    model = ServedModel("m", context, byte_level)
    prompt = ("the quick brown fox jumps over the lazy dog; " * context)[: model.max_prompt_bytes // 2]
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    ids = await encode_prompt(model, prompt)
    took = time.perf_counter() - started
    done.set()
    await ticking
    assert ids == byte_level.encode(prompt).ids
    assert took > 0.1, "the prompt is too short to tell"
    # Holding the GIL, the longest pause is the whole tokenizing time; half of it leaves room for
    # a busy machine's scheduling.
    assert max(gaps) < took / 2, (max(gaps), took)
