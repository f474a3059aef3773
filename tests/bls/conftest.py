"""Fixtures for the bls tests: a small real byte-level BPE tokenizer, trained here.

Byte-level, so characters outside the training text (emoji, CJK) come out as several byte
tokens each: exactly the split-UTF-8 case the detokenizer must handle. Special tokens follow
the project's convention: <pad>=0, <s>=1 (prepended by the post-processor), </s>=2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from bls.tokenizer import PromptTokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Observation: the answer is forty two.",
    "Stop here. Then continue with the next line.\n",
    "Hello world, hello tokens, hello streams.",
] * 20


def build_tokenizer_json(out_dir: Path) -> Path:
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer_json(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> PromptTokenizer:
    return PromptTokenizer.from_model_dir(tokenizer_dir)
