"""The models this gateway serves: their limits and tokenizers, for checks at the edge.

A prompt that cannot fit is refused here with a 400 that names the limit, before it costs a
server anything. The count uses the model's own `tokenizer.json`, the file the Triton
`preprocessing` model reads, so both sides agree on the length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from config.settings import SwitchyardConfig


@dataclass(frozen=True, slots=True)
class ServedModel:
    model_id: str
    max_context_tokens: int
    tokenizer: Tokenizer

    def encode_prompt(self, text: str) -> list[int]:
        """Prompt token ids, special tokens (such as BOS) included, as the servers encode it."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=True).ids
        return ids

    def count_tokens(self, text: str) -> int:
        """Prompt length in tokens, special tokens (such as BOS) included."""
        return len(self.encode_prompt(text))


class ModelCatalog:
    """Configured models by id, each with its tokenizer loaded once at start-up."""

    def __init__(self, models: dict[str, ServedModel]) -> None:
        self._models = models

    @classmethod
    def load(cls, config: SwitchyardConfig) -> ModelCatalog:
        models: dict[str, ServedModel] = {}
        for model_id, spec in config.models.items():
            path = config.model_dir(model_id) / "tokenizer.json"
            models[model_id] = ServedModel(model_id, spec.max_context_tokens, _load_tokenizer(path, model_id))
        return cls(models)

    def get(self, model_id: str) -> ServedModel | None:
        return self._models.get(model_id)

    def ids(self) -> list[str]:
        return list(self._models)

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._models.values())


def _load_tokenizer(path: Path, model_id: str) -> Tokenizer:
    if not path.is_file():
        raise FileNotFoundError(
            f"model {model_id!r} has no tokenizer at {path}: run `switchyard build --model {model_id}`"
        )
    return Tokenizer.from_file(str(path))
