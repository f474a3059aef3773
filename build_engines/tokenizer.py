"""Train and save the byte-level BPE tokenizer of a model the project builds itself.

Byte-level BPE (GPT-2 / Llama 3 style) can encode any text, so no input is ever unknown, and
its ids for a given corpus are deterministic. Special ids follow the HF Llama layout the rest
of the stack assumes: `<pad>` 0, `<s>` (bos) 1, `</s>` (eos) 2. Encoding with special tokens
prepends `<s>`, as Llama tokenizers do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<pad>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)  # ids 0, 1, 2 in this order

# The Llama 2 chat template as published with HF checkpoints. It writes `<s>` itself, so text
# rendered from it is encoded with add_special_tokens=False (what HF's apply_chat_template does).
LLAMA_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens (specials and all 256 bytes included).

    Raises ValueError when the texts hold too few distinct pairs to learn that many merges.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 256:
        raise ValueError(f"vocab_size {vocab_size} cannot hold 256 bytes and {len(SPECIAL_TOKENS)} special tokens")
    tokenizer = Tokenizer(models.BPE())
    # add_prefix_space=False: decode(encode(text)) gives back exactly `text`.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise ValueError(f"training text too small: learned {tokenizer.get_vocab_size()} tokens, need {vocab_size}")
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json, as HF expects."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=True)
    specials = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": model_max_length,
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "chat_template": LLAMA_CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(specials, indent=2, sort_keys=True) + "\n")
