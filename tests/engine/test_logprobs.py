"""Log-probabilities: the arithmetic of `token_logprobs`, and what the engine reports with a real
numpy Llama: nothing unless asked, one entry per generated token consistent with the sampler,
the prompt's own scored exactly as the same tokens are when generated, through a full prefix
cache, and a resumed reply's equal to the original's."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from build_engines.checkpoint import llama_config_dict, write_random_checkpoint
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.logprobs import token_logprobs
from engine.request import LOGPROB_FLOOR, EngineRequest, FinishReason, RequestOutput, SamplingParams, TokenLogprobs


def test_logprobs_are_the_log_softmax_with_the_top_alternatives_in_order() -> None:
    logits = np.array([[1.0, 3.0, 3.0, -np.inf, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    got = token_logprobs(logits, [2, 4], 3)
    z = math.log(math.exp(1) + 2 * math.exp(3) + math.exp(0.5))
    assert got.token_logprobs == pytest.approx((3 - z, -math.log(5)))
    assert got.top_token_ids == (1, 2, 0, 0, 1, 2)  # ties: the lower id first, in both rows
    assert got.top_logprobs == pytest.approx((3 - z, 3 - z, 1 - z, -math.log(5), -math.log(5), -math.log(5)))
    everything = token_logprobs(logits, [3, 0], 5)
    assert everything.token_logprobs[0] == LOGPROB_FLOOR  # masked: finite, as OpenAI's -9999.0
    assert sum(math.exp(v) for v in everything.top_logprobs[:5]) == pytest.approx(1.0)
    alone = token_logprobs(logits, [0, 0], 0)
    assert alone.token_logprobs == pytest.approx((1 - z, -math.log(5))) and alone.top_token_ids == ()


def test_runs_join_and_slice() -> None:
    a = TokenLogprobs((-1.0, -2.0), (1, 2, 3, 4), (-1.0, -1.5, -2.0, -2.5), 2)
    b = TokenLogprobs((-3.0,), (5, 6), (-3.0, -4.0), 2)
    assert (a + b).slice(1, 3) == TokenLogprobs((-2.0, -3.0), (3, 4, 5, 6), (-2.0, -2.5, -3.0, -4.0), 2)
    with pytest.raises(ValueError, match="alternatives"):
        a + TokenLogprobs((-1.0,))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("logprobs")
    config = llama_config_dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    write_random_checkpoint(config, seed=3, out_dir=out)
    return out


def serve(checkpoint: Path, *requests: EngineRequest, **config: object) -> dict[str, list[RequestOutput]]:
    engine = LLMEngine.from_pretrained(
        checkpoint, EngineConfig(**{"kv_capacity_tokens": 1024, "block_size": 4, **config})
    )  # type: ignore[arg-type]
    outputs: dict[str, list[RequestOutput]] = {}
    for request in requests:
        engine.add_request(request)
        while engine.has_unfinished():  # one after the other: the later ones may hit the cache
            for output in engine.step():
                outputs.setdefault(output.request_id, []).append(output)
    return outputs


def joined(outputs: list[RequestOutput]) -> TokenLogprobs:
    runs = [o.logprobs for o in outputs if o.logprobs is not None]
    total = runs[0]
    for run in runs[1:]:
        total = total + run
    return total


PROMPT = tuple(range(5, 25))


def test_nothing_is_computed_or_sent_when_not_asked(checkpoint: Path) -> None:
    outputs = serve(checkpoint, EngineRequest("r", PROMPT, SamplingParams(max_tokens=6)))["r"]
    assert all(o.logprobs is None and o.prompt_logprobs is None for o in outputs)


def test_each_generated_token_has_its_logprob_and_alternatives(checkpoint: Path) -> None:
    for sampling in (SamplingParams(max_tokens=12, logprobs=5, ignore_eos=True),
                     SamplingParams(max_tokens=12, logprobs=5, ignore_eos=True, temperature=1.3, seed=4)):  # fmt: skip
        outputs = serve(checkpoint, EngineRequest("r", PROMPT, sampling))["r"]
        tokens = [t for o in outputs for t in o.new_token_ids]
        run = joined(outputs)
        assert len(run) == len(tokens) == 12 and run.num_top == 5
        for i, (token, logprob) in enumerate(zip(tokens, run.token_logprobs, strict=True)):
            top_ids, top = run.top_token_ids[5 * i : 5 * i + 5], run.top_logprobs[5 * i : 5 * i + 5]
            assert math.exp(logprob) <= 1.0 and top[0] >= logprob and list(top) == sorted(top, reverse=True)
            if token in top_ids:
                assert top[top_ids.index(token)] == logprob
            if sampling.temperature == 0:
                assert top_ids[0] == token  # greedy picks the most likely token


def test_a_prompt_is_scored_as_the_same_tokens_are_when_generated(checkpoint: Path) -> None:
    """An evaluation harness scores an answer with `echo`: the prompt's log-probabilities of
    the generated tokens are the ones generation reported, even with the prompt's prefix in the
    cache (a prompt that wants its logits is read in full, and cached_tokens says 0)."""
    generated = serve(
        checkpoint, EngineRequest("g", PROMPT, SamplingParams(max_tokens=10, logprobs=2, ignore_eos=True))
    )["g"]
    answer = tuple(t for o in generated for t in o.new_token_ids)
    scored = serve(
        checkpoint,
        EngineRequest("warm", PROMPT + answer, SamplingParams(max_tokens=1)),
        EngineRequest("echo", PROMPT + answer, SamplingParams(max_tokens=1, prompt_logprobs=2)),
        EngineRequest("again", PROMPT + answer, SamplingParams(max_tokens=1)),
        max_num_batched_tokens=8,  # the prompt is read in chunks
    )
    [prompt_run] = [o.prompt_logprobs for o in scored["echo"] if o.prompt_logprobs is not None]
    assert len(prompt_run) == len(PROMPT) + len(answer) - 1 and scored["echo"][-1].cached_tokens == 0
    assert scored["again"][-1].cached_tokens > 0 and all(o.prompt_logprobs is None for o in scored["again"])
    tail = prompt_run.slice(len(PROMPT) - 1, len(prompt_run))
    assert tail.token_logprobs == pytest.approx(joined(generated).token_logprobs, abs=1e-4)
    assert tail.top_token_ids == joined(generated).top_token_ids


def test_a_resumed_reply_reports_the_original_logprobs(checkpoint: Path) -> None:
    sampling = SamplingParams(max_tokens=12, logprobs=3, ignore_eos=True)
    whole = serve(checkpoint, EngineRequest("a", PROMPT, sampling))["a"]
    tokens = tuple(t for o in whole for t in o.new_token_ids)
    resumed = serve(checkpoint, EngineRequest("b", PROMPT, sampling, resume_token_ids=tokens[:5]))["b"]
    assert tuple(t for o in resumed for t in o.new_token_ids) == tokens[5:]
    assert joined(resumed).token_logprobs == pytest.approx(joined(whole).slice(5, 12).token_logprobs, abs=1e-4)
    assert resumed[-1].finish_reason is FinishReason.LENGTH


def test_logprob_counts_past_the_bound_are_refused(checkpoint: Path) -> None:
    engine = LLMEngine.from_pretrained(checkpoint, EngineConfig(kv_capacity_tokens=256, block_size=4))
    with pytest.raises(ValueError, match=r"logprobs must be in \[0, 20\]"):
        engine.validate_request(EngineRequest("r", PROMPT, SamplingParams(max_tokens=2, logprobs=21)))
    with pytest.raises(ValueError, match=r"prompt_logprobs must be in \[0, 20\]"):
        engine.validate_request(EngineRequest("r", PROMPT, SamplingParams(max_tokens=2, prompt_logprobs=-1)))
