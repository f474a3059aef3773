"""The models this gateway serves: their limits and tokenizers, for checks at the edge.

A prompt that cannot fit is refused here with a 400 that names the limit, before it costs a
server anything. The count uses the model's own `tokenizer.json`, the file the Triton
`preprocessing` model reads, so both sides agree on the length.

Tokenizing is the costly part of the edge (a 600 KB prompt: ~0.3 s of one core), so two rules
keep it from hurting anyone else:

    size first    every token covers at least one byte of the prompt and at most the vocab's
                  longest token (`longest_token_bytes`, measured at load), so a prompt over
                  `max_context_tokens x longest_token_bytes` bytes cannot fit: refused by its
                  size alone (contracts/prompt_context.py), never tokenized
    off the loop  `encode_prompt` calls `encode_batch`, which releases the GIL (`encode` holds
                  it for the whole prompt); the gateway runs long prompts on the catalog's own
                  few threads, so the event loop keeps serving every other stream meanwhile
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from config.settings import SwitchyardConfig
from contracts.prompt_encoding import PromptEncoder
from contracts.token_text import TokenTexts


@dataclass(frozen=True, slots=True)
class ServedModel:
    model_id: str
    max_context_tokens: int
    tokenizer: Tokenizer
    # Unix time the model's files were built (its tokenizer.json's modification time): OpenAI's
    # `Model.created`, the same on every call and every gateway serving that build. 0 (the
    # epoch) only for models made in memory.
    created: int = 0
    # Where long prompts are tokenized (None: the event loop's default executor).
    executor: Executor | None = field(default=None, compare=False, repr=False)
    # The most UTF-8 bytes of prompt one token stands for (measured from the vocab at load).
    longest_token_bytes: int = field(init=False, compare=False)
    # Encodes prompts as the model servers do (chat content's special-token text as text).
    encoder: PromptEncoder = field(init=False, compare=False, repr=False)
    # Each token's bytes and text, for log-probabilities (worked out on first use).
    token_texts: TokenTexts = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "longest_token_bytes", longest_token_bytes(self.tokenizer))
        object.__setattr__(self, "encoder", PromptEncoder(self.tokenizer))
        object.__setattr__(self, "token_texts", TokenTexts(self.tokenizer))

    @property
    def max_prompt_bytes(self) -> int:
        """Longer prompts (in UTF-8 bytes) cannot fit the context, whatever their text."""
        return self.max_context_tokens * self.longest_token_bytes

    def encode_prompt(self, text: str) -> list[int]:
        """Prompt token ids, special tokens (such as BOS) included, as the servers encode it.

        `encode_batch` of one text, not `encode`: the same ids, but the Rust side runs with the
        GIL released, so other threads (the event loop) keep running while it works."""
        return self.encoder.encode(text)

    def count_tokens(self, text: str) -> int:
        """Prompt length in tokens, special tokens (such as BOS) included."""
        return len(self.encode_prompt(text))


class ModelCatalog:
    """Configured models by id, each with its tokenizer loaded once at start-up."""

    def __init__(self, models: dict[str, ServedModel], executor: ThreadPoolExecutor | None = None) -> None:
        self._models = models
        self._executor = executor

    @classmethod
    def load(cls, config: SwitchyardConfig) -> ModelCatalog:
        """Every configured model, sharing `gateway.tokenizer_threads` threads for long prompts
        (made on first use; `close` ends them)."""
        executor = ThreadPoolExecutor(config.gateway.tokenizer_threads, thread_name_prefix="tokenize")
        models: dict[str, ServedModel] = {}
        for model_id, spec in config.models.items():
            path = config.model_dir(model_id) / "tokenizer.json"
            tokenizer = _load_tokenizer(path, model_id)
            created = int(path.stat().st_mtime)
            models[model_id] = ServedModel(model_id, spec.max_context_tokens, tokenizer, created, executor)
        return cls(models, executor)

    def close(self) -> None:
        """End the tokenizing threads (prompts still being tokenized finish first)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def get(self, model_id: str) -> ServedModel | None:
        return self._models.get(model_id)

    def ids(self) -> list[str]:
        return list(self._models)

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())


def longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes of text one token of `tokenizer` can stand for.

    A byte-level vocab spells each byte as one character (GPT-2's byte alphabet), so a token
    stands for as many bytes as it has characters; any other vocab is taken at its UTF-8
    length, which over-counts its markers (`▁`, `##`, `<0x41>`) and so only loosens the bound.
    Added tokens (BOS, chat markers) match their text as written."""
    spec = json.loads(tokenizer.to_str())
    byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))
    added = {token["content"] for token in spec.get("added_tokens", [])}
    return max(
        (len(token) if byte_level and token not in added else len(token.encode()))
        for token in tokenizer.get_vocab(with_added_tokens=True)
    )


def _load_tokenizer(path: Path, model_id: str) -> Tokenizer:
    if not path.is_file():
        raise FileNotFoundError(
            f"model {model_id!r} has no tokenizer at {path}: run `switchyard build --model {model_id}`"
        )
    return Tokenizer.from_file(str(path))
