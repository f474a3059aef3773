"""The model's tokenizer as preprocessing and postprocessing use it.

Loaded from the checkpoint's `tokenizer.json` with the `tokenizers` library (no
`transformers`). Prompts are encoded with the tokenizer's own post-processor, so the BOS token
is added exactly when the checkpoint says so; stop strings are encoded bare (no special
tokens), because they are matched against the tail of a reply, never its start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from contracts.prompt_encoding import PromptEncoder


@dataclass(frozen=True, slots=True)
class StopTokenSequences:
    """Stop strings as token sequences, flattened the way TensorRT-LLM's stop_words_list is.

    `offsets[i]` is the end of sequence i in `flat_ids`, so sequence i is
    `flat_ids[offsets[i-1]:offsets[i]]` (0 for i == 0).
    """

    flat_ids: tuple[int, ...]
    offsets: tuple[int, ...]

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]]) -> StopTokenSequences:
        flat: list[int] = []
        offsets: list[int] = []
        for seq in sequences:
            flat.extend(seq)
            offsets.append(len(flat))
        return cls(tuple(flat), tuple(offsets))

    def sequences(self) -> tuple[tuple[int, ...], ...]:
        """Unflatten; raises ValueError when the offsets do not describe `flat_ids`."""
        result: list[tuple[int, ...]] = []
        start = 0
        for end in self.offsets:
            if end < start or end > len(self.flat_ids):
                raise ValueError(f"stop token offsets {list(self.offsets)} do not fit {len(self.flat_ids)} ids")
            result.append(self.flat_ids[start:end])
            start = end
        if start != len(self.flat_ids):
            raise ValueError("stop token offsets leave ids unaccounted for")
        return tuple(seq for seq in result if seq)


def _token_ids(raw: object) -> tuple[int, ...]:
    """A config's `eos_token_id`-style value (an id, a list of ids, or null) as a tuple."""
    values = raw if isinstance(raw, list) else [] if raw is None else [raw]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"token ids must be integers, got {raw!r}")
    return tuple(values)


@dataclass(frozen=True, slots=True)
class GenerationTokenIds:
    """The special ids generation needs: every end-of-sequence id, and the padding id."""

    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> GenerationTokenIds:
        """From `generation_config.json` (what generation uses; it may list several EOS ids,
        e.g. end-of-text and end-of-turn), falling back to `config.json` key by key."""
        merged: dict[str, object] = {}
        for name in ("config.json", "generation_config.json"):  # later files win
            path = model_dir / name
            if path.is_file():
                merged.update({k: v for k, v in json.loads(path.read_text()).items() if v is not None})
        try:
            eos = _token_ids(merged.get("eos_token_id"))
            pad = _token_ids(merged.get("pad_token_id"))
        except ValueError as exc:
            raise ValueError(f"{model_dir}: {exc}") from None
        return cls(eos, pad[0] if pad else None)


class PromptTokenizer:
    """Encode prompts and stop strings; decode completion tokens."""

    def __init__(self, tokenizer: Tokenizer, eos_token_id: int | None = None) -> None:
        self._tokenizer = tokenizer
        self._prompts = PromptEncoder(tokenizer)
        self.eos_token_id = eos_token_id

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> PromptTokenizer:
        """Load `tokenizer.json` (and the EOS id from `config.json` when present)."""
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {model_dir}: build the model first (switchyard build)")
        eos: int | None = None
        config_path = model_dir / "config.json"
        if config_path.is_file():
            raw = json.loads(config_path.read_text()).get("eos_token_id")
            eos = raw[0] if isinstance(raw, list) and raw else raw if isinstance(raw, int) else None
        return cls(Tokenizer.from_file(str(path)), eos)

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode_prompt(self, text: str) -> list[int]:
        """Prompt token ids, special tokens (BOS) added as the tokenizer's post-processor says;
        special-token text a chat message held (marked by the gateway) encoded as text."""
        return self._prompts.encode(text)

    def encode_stop(self, text: str) -> list[int]:
        """One stop string as bare token ids (no BOS)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_stops(self, stops: Sequence[str]) -> StopTokenSequences:
        """Every non-empty stop string as a token sequence, flattened with end offsets."""
        return StopTokenSequences.from_sequences([self.encode_stop(s) for s in stops if s])

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`, special tokens (EOS, padding) left out."""
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))
