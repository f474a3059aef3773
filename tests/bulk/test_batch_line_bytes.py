"""A batch line whose prompt cannot fit the context by its size is refused untokenized, with
the same code as one refused by its token count."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from tokenizers import Tokenizer

from build_engines.corpus import generate_corpus
from build_engines.tokenizer import train_tokenizer
from bulk.batch_lines import LineError, LineValidator
from contracts.catalog import ServedModel

CONTEXT = 512


@dataclass(frozen=True, slots=True)
class CountingModel(ServedModel):
    counted: list[int] = field(default_factory=list)

    def count_tokens(self, text: str) -> int:
        self.counted.append(len(text))
        return ServedModel.count_tokens(self, text)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(generate_corpus(5, 300), 300)


@pytest.mark.parametrize("fmt", ["native", "openai"])
def test_a_prompt_too_long_in_bytes_is_refused_untokenized(tokenizer: Tokenizer, fmt: str) -> None:
    model = CountingModel("m", CONTEXT, tokenizer)
    prompt = "x" * (model.max_prompt_bytes + 1)
    body = {"prompt": prompt, "max_tokens": 8}
    line = (
        body
        if fmt == "native"
        else {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "m", **body}}
    )
    validator = LineValidator(model, "native") if fmt == "native" else LineValidator(model, "openai", "/v1/completions")
    error = validator.validate(3, json.dumps(line).encode())
    assert isinstance(error, LineError)
    assert error.code == "context_length_exceeded"
    assert f"prompt is {len(prompt)} bytes" in error.message
    assert model.counted == []
