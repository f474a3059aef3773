from __future__ import annotations

from pathlib import Path

import pytest

from bls.tokenizer import PromptTokenizer, StopTokenSequences


def test_prompt_gets_bos_and_stop_does_not(tokenizer: PromptTokenizer) -> None:
    prompt = tokenizer.encode_prompt("Hello world")
    stop = tokenizer.encode_stop("Hello world")
    assert prompt[0] == 1
    assert prompt[1:] == stop
    assert tokenizer.decode(prompt) == "Hello world"


def test_encode_stops_flattens_with_end_offsets(tokenizer: PromptTokenizer) -> None:
    stops = tokenizer.encode_stops(["Observation:", "", "\n"])
    first, second = tokenizer.encode_stop("Observation:"), tokenizer.encode_stop("\n")
    assert stops.flat_ids == (*first, *second)
    assert stops.offsets == (len(first), len(first) + len(second))
    assert stops.sequences() == (tuple(first), tuple(second))


def test_sequences_rejects_offsets_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        StopTokenSequences((1, 2), (3,)).sequences()
    with pytest.raises(ValueError, match="unaccounted"):
        StopTokenSequences((1, 2, 3), (2,)).sequences()


def test_missing_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="switchyard build"):
        PromptTokenizer.from_model_dir(tmp_path)
