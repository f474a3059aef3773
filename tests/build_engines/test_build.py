"""`build_model`: a tokenizer and random-weight checkpoint that load, deterministically."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from build_engines.build import STAMP_FILE, build_model, validate_checkpoint
from build_engines.corpus import generate_corpus
from config.settings import Architecture, ModelSpec
from engine.config import ModelConfig
from engine.forward_batch import SequenceChunk
from engine.model import NumpyLlama

TINY = Architecture(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=320,
)


def tiny_spec(seed: int = 5, **overrides: object) -> ModelSpec:
    fields: dict[str, object] = {
        "weights_uri": "var/models/tiny",
        "max_context_tokens": 128,
        "architecture": TINY,
        "seed": seed,
    }
    return ModelSpec(**{**fields, **overrides})  # type: ignore[arg-type]


def quiet(_: str) -> None:
    """Swallow progress lines in tests."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model("tiny", tiny_spec(), tmp_path_factory.mktemp("models") / "tiny", log=quiet)


def test_files_and_config_fields(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        STAMP_FILE,
    } <= names
    raw = json.loads((built / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLM"] and raw["model_type"] == "llama"
    assert raw["max_position_embeddings"] == 128 and raw["torch_dtype"] == "float32"
    assert (raw["bos_token_id"], raw["eos_token_id"], raw["tie_word_embeddings"]) == (1, 2, False)
    config = ModelConfig.from_pretrained(built)
    assert (config.vocab_size, config.hidden_size, config.num_key_value_heads) == (320, 16, 1)
    tok_config = json.loads((built / "tokenizer_config.json").read_text())
    assert (tok_config["bos_token"], tok_config["eos_token"], tok_config["pad_token"]) == (
        "<s>",
        "</s>",
        "<pad>",
    )
    assert tok_config["model_max_length"] == 128 and "[INST]" in tok_config["chat_template"]


def test_tokenizer_round_trips_text_and_adds_bos(built: Path) -> None:
    tokenizer = Tokenizer.from_file(str(built / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 320
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "<s>", "</s>")] == [0, 1, 2]
    text = "Hello, world! Café über 中文 🚀 costs $12.50 at 09:30."
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == 1 and 1 not in encoding.ids[1:]
    assert tokenizer.decode(encoding.ids) == text
    assert tokenizer.encode(text, add_special_tokens=False).ids == encoding.ids[1:]
    assert len(encoding.ids) < len(text.encode()), "BPE should merge some bytes"


def test_model_loads_and_greedy_output_depends_on_the_prompt(built: Path) -> None:
    model = NumpyLlama.from_pretrained(built, num_blocks=8, block_size=16)
    assert (model.vocab_size, model.eos_token_id) == (320, 2)
    tokenizer = Tokenizer.from_file(str(built / "tokenizer.json"))
    prompts = ["The server reads a long document.", "Bonjour café!", "42 + 17 =", "def f(x):"]
    chunks = [
        SequenceChunk(tuple(tokenizer.encode(p).ids), 0, (2 * i, 2 * i + 1), need_logits=True)
        for i, p in enumerate(prompts)
    ]
    logits = model.forward(chunks)
    assert logits.shape == (4, 320) and np.all(np.isfinite(logits))
    assert len({int(np.argmax(row)) for row in logits}) > 1
    assert float(logits.std()) > 0.1, "logits should not be near-equal"


def test_two_builds_are_byte_identical(built: Path, tmp_path: Path) -> None:
    again = build_model("tiny", tiny_spec(), tmp_path / "tiny", log=quiet)
    for path in sorted(built.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


def test_build_is_skipped_when_up_to_date_and_redone_when_the_spec_changes(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    shutil.copytree(built, out)
    lines: list[str] = []
    build_model("tiny", tiny_spec(), out, log=lines.append)
    assert lines == [f"tiny: up to date ({out})"]

    weights_before = (out / "model.safetensors").read_bytes()
    lines.clear()
    build_model("tiny", tiny_spec(seed=6), out, log=lines.append)
    assert "up to date" not in " ".join(lines)
    assert (out / "model.safetensors").read_bytes() != weights_before
    assert not (tmp_path / ".tiny.building").exists()

    # A field the files do not depend on does not trigger a rebuild.
    lines.clear()
    build_model("tiny", tiny_spec(seed=6, weights_gb=40.0), out, log=lines.append)
    assert lines == [f"tiny: up to date ({out})"]


def test_a_build_missing_a_file_is_redone(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    shutil.copytree(built, out)
    (out / "model.safetensors").unlink()
    build_model("tiny", tiny_spec(), out, log=quiet)
    assert (out / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()


def test_operator_checkpoint_is_validated_not_built(built: Path, tmp_path: Path) -> None:
    spec = tiny_spec(architecture=None)
    assert build_model("tiny", spec, built, log=quiet) == built
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        build_model("ghost", spec, tmp_path / "ghost", log=quiet)
    broken = tmp_path / "broken"
    shutil.copytree(built, broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        validate_checkpoint("broken", broken)


def test_corpus_is_a_function_of_the_seed() -> None:
    first = generate_corpus(3, 200)
    assert first == generate_corpus(3, 200) and first != generate_corpus(4, 200)
    text = "\n".join(generate_corpus(3, 2000))
    assert any(ord(c) > 0xFFFF for c in text), "emoji (4-byte UTF-8) should be present"
    assert any("\u4e00" <= c <= "\u9fff" for c in text) and "é" in text and any(c.isdigit() for c in text)
