"""How LlmApiEngineLoop ends a constrained reply (over the fake LLM API): TensorRT-LLM's llguidance
matcher, once it gives up mid-reply (a limit hit), allows only the end token, and the LLM API
reports `stop`; the loop checks such a reply against its grammar with the checkpoint's tokenizer
and ends it GRAMMAR_FAILED unless its text is complete, as the CPU engine does."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from engine.engine_loop import RequestStream
from engine.grammar import GrammarCompiler
from engine.request import EngineRequest, FinishReason, RequestOutput, SamplingParams
from tests.trtllm.fake_llm import FakeLLM
from trtllm.engine_loop import EngineLimits, LlmApiEngineLoop

TIMEOUT_S = 10.0
END_ID = 257  # after the 256 bytes and the tokenizer's own end token
LIMITS = EngineLimits(
    vocab_size=258, max_seq_len=64, max_batch_size=8, kv_tokens=4096, tokens_per_block=32, end_id=END_ID
)
GRAMMAR = 'start: %json {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}'
PROMPT = (1, 2)


@pytest.fixture(scope="module")
def byte_tokenizer() -> Tokenizer:
    """A byte-level tokenizer: one token per byte, no merges."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<eos>", "</s>"])  # 256, and END_ID
    return tokenizer


def read_to_end(stream: RequestStream) -> list[RequestOutput]:
    outputs: list[RequestOutput] = []
    while not outputs or not outputs[-1].finished:
        output = stream.wait(TIMEOUT_S)
        assert output is not None, "the stream did not finish"
        outputs.append(output)
    return outputs


def serve(reply: list[int], grammars: GrammarCompiler | None) -> list[RequestOutput]:
    """The loop's outputs for one constrained request whose LLM writes `reply`, then its end."""

    def next_token(context: list[int]) -> int:
        done = len(context) - len(PROMPT)
        return reply[done] if done < len(reply) else END_ID

    loop = LlmApiEngineLoop(
        FakeLLM(vocab_size=LIMITS.vocab_size, next_token=next_token),
        dict,
        LIMITS,
        stats_interval_s=0.01,
        guided_decoding_params=dict,
        grammars=grammars,
    )
    loop.start()
    try:
        request = EngineRequest("g", PROMPT, SamplingParams(max_tokens=30, grammar=GRAMMAR))
        return read_to_end(loop.submit(request))
    finally:
        loop.stop(TIMEOUT_S)


def test_a_reply_ended_stop_is_stop_only_when_complete_under_its_grammar(byte_tokenizer: Tokenizer) -> None:
    grammars = GrammarCompiler.from_tokenizer_json(byte_tokenizer.to_str(), LIMITS.vocab_size, END_ID)
    for text, reason in (('{"a":12}', FinishReason.STOP), ('{"a":1', FinishReason.GRAMMAR_FAILED)):
        reply = byte_tokenizer.encode(text).ids
        outputs = serve(reply, grammars)
        assert [t for o in outputs for t in o.new_token_ids] == reply
        assert outputs[-1].finish_reason is reason, text


def test_without_the_checkpoints_tokenizer_the_llm_apis_stop_stands(byte_tokenizer: Tokenizer) -> None:
    outputs = serve(byte_tokenizer.encode('{"a":1').ids, None)
    assert outputs[-1].finish_reason is FinishReason.STOP
