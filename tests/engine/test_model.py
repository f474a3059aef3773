"""NumpyLlama's paged, chunked forward pass equals a naive full-recompute Llama."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from build_engines.checkpoint import llama_config_dict, random_llama_tensors
from engine.config import ModelConfig
from engine.forward_batch import Model, SequenceChunk
from engine.model import NumpyLlama, batched_decode_attention, decode_groups, paged_attention
from engine.weights import F32, llama_weights_from_tensors

BLOCK_SIZE = 4
NUM_BLOCKS = 64


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    """tests/engine/reference_model.py, loaded by path (pytest runs in importlib mode)."""
    path = Path(__file__).with_name("reference_model.py")
    spec = importlib.util.spec_from_file_location("engine_reference_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_config(heads: int = 4, kv_heads: int = 2, vocab: int = 97) -> ModelConfig:
    raw = llama_config_dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
    )
    return ModelConfig.from_dict(raw)


def paged_model(config: ModelConfig, tensors: dict[str, F32]) -> NumpyLlama:
    return NumpyLlama(llama_weights_from_tensors(config, tensors), NUM_BLOCKS, BLOCK_SIZE)


def scattered_table(num_blocks: int, seed: int) -> tuple[int, ...]:
    """Non-contiguous, unordered block ids, as a block manager hands out after some churn."""
    return tuple(int(b) for b in np.random.default_rng(seed).permutation(NUM_BLOCKS)[:num_blocks])


def prompt_of(length: int, vocab: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, length)]


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 2), (4, 4), (4, 1)], ids=["gqa", "mha", "mqa"])
@pytest.mark.parametrize("chunk_sizes", [[37], [16, 21], [5] * 7 + [2], [1] * 37], ids=str)
def test_chunked_prefill_matches_reference(ref: ModuleType, heads: int, kv_heads: int, chunk_sizes: list[int]) -> None:
    config = tiny_config(heads, kv_heads)
    tensors = random_llama_tensors(config, seed=3)
    model = paged_model(config, tensors)
    prompt = prompt_of(37, config.vocab_size, seed=1)
    table = scattered_table(10, seed=2)
    expected = ref.reference_logits(config, tensors, prompt)

    start = 0
    for size in chunk_sizes:
        chunk = SequenceChunk(tuple(prompt[start : start + size]), start, table, need_logits=True)
        logits = model.forward([chunk])
        assert logits.shape == (1, config.vocab_size) and logits.dtype == np.float32
        np.testing.assert_allclose(logits[0], expected[start + size - 1], rtol=1e-4, atol=1e-4)
        start += size


def test_one_step_mixing_prefill_and_decode_matches_reference(ref: ModuleType) -> None:
    """Several sequences in one forward call: each gets exactly its own logits."""
    config = tiny_config()
    tensors = random_llama_tensors(config, seed=4)
    model = paged_model(config, tensors)
    prompts = [prompt_of(n, config.vocab_size, seed=n) for n in (9, 23, 14)]
    tables = [(5, 17, 2), (40, 3, 33, 8, 61, 12), (0, 9, 50, 26)]

    # Step 1: A reads all 9 tokens, B its first 12 (no logits), C all 14.
    step1 = [
        SequenceChunk(tuple(prompts[0]), 0, tables[0], need_logits=True),
        SequenceChunk(tuple(prompts[1][:12]), 0, tables[1], need_logits=False),
        SequenceChunk(tuple(prompts[2]), 0, tables[2], need_logits=True),
    ]
    logits1 = model.forward(step1)
    assert logits1.shape == (2, config.vocab_size)
    np.testing.assert_allclose(logits1[0], ref.reference_logits(config, tensors, prompts[0])[-1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits1[1], ref.reference_logits(config, tensors, prompts[2])[-1], rtol=1e-4, atol=1e-4)

    # Step 2: A and C decode one token each around B's second chunk.
    next_a, next_c = int(np.argmax(logits1[0])), int(np.argmax(logits1[1]))
    step2 = [
        SequenceChunk((next_a,), 9, tables[0], need_logits=True),
        SequenceChunk(tuple(prompts[1][12:]), 12, tables[1], need_logits=True),
        SequenceChunk((next_c,), 14, tables[2], need_logits=True),
    ]
    logits2 = model.forward(step2)
    expected = [
        ref.reference_logits(config, tensors, [*prompts[0], next_a])[-1],
        ref.reference_logits(config, tensors, prompts[1])[-1],
        ref.reference_logits(config, tensors, [*prompts[2], next_c])[-1],
    ]
    np.testing.assert_allclose(logits2, np.stack(expected), rtol=1e-4, atol=1e-4)


def test_greedy_generation_matches_reference_token_for_token(ref: ModuleType) -> None:
    config = tiny_config()
    tensors = random_llama_tensors(config, seed=5)
    model = paged_model(config, tensors)
    prompt = prompt_of(11, config.vocab_size, seed=6)
    table = scattered_table(8, seed=7)

    generated: list[int] = []
    logits = model.forward([SequenceChunk(tuple(prompt), 0, table, need_logits=True)])
    for step in range(16):
        generated.append(int(np.argmax(logits[0])))
        chunk = SequenceChunk((generated[-1],), len(prompt) + step, table, need_logits=True)
        logits = model.forward([chunk])

    assert generated == ref.reference_greedy(config, tensors, prompt, 16)
    assert len(set(generated)) > 1, "random weights should not collapse to one token"


def test_large_activations_take_the_max_shift_path(ref: ModuleType) -> None:
    """Scores far beyond exp's range still give the reference's softmax (row-max shift)."""
    config = tiny_config()
    tensors = random_llama_tensors(config, seed=8)
    for i in range(config.num_hidden_layers):
        for proj in ("q_proj", "k_proj"):
            tensors[f"model.layers.{i}.self_attn.{proj}.weight"] *= np.float32(12.0)
    model = paged_model(config, tensors)
    prompt = prompt_of(30, config.vocab_size, seed=9)
    table = scattered_table(8, seed=10)
    model.forward([SequenceChunk(tuple(prompt[:13]), 0, table, need_logits=False)])
    logits = model.forward([SequenceChunk(tuple(prompt[13:]), 13, table, need_logits=True)])
    assert np.all(np.isfinite(logits))
    np.testing.assert_allclose(logits[0], ref.reference_logits(config, tensors, prompt)[-1], rtol=1e-4, atol=1e-3)


def test_attention_tiles_do_not_change_the_result() -> None:
    """Splitting a chunk's queries into many tiles gives the same output as one tile."""
    rng = np.random.default_rng(11)
    n, start, heads, kv_heads, dim = 10, 7, 4, 2, 8
    q = rng.standard_normal((n, heads, dim), dtype=np.float32)
    k = rng.standard_normal((n, kv_heads, dim), dtype=np.float32)
    v = rng.standard_normal((n, kv_heads, dim), dtype=np.float32)
    table = (6, 1, 4, 3, 0)
    k_cache = rng.standard_normal((8, BLOCK_SIZE, kv_heads, dim), dtype=np.float32)
    v_cache = rng.standard_normal((8, BLOCK_SIZE, kv_heads, dim), dtype=np.float32)
    outputs = []
    for tile in (1, 2 * 2 * 3 * 17, 1 << 20):  # one query per tile, three per tile, one tile
        outputs.append(paged_attention(q, k, v, k_cache, v_cache, table, start, max_tile_scores=tile))
    np.testing.assert_allclose(outputs[0], outputs[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs[1], outputs[2], rtol=1e-5, atol=1e-6)


def test_chunks_without_need_logits_return_no_rows() -> None:
    config = tiny_config()
    model = paged_model(config, random_llama_tensors(config, seed=12))
    logits = model.forward([SequenceChunk((1, 2, 3), 0, (4,), need_logits=False)])
    assert logits.shape == (0, config.vocab_size)
    assert model.forward([]).shape == (0, config.vocab_size)


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        (SequenceChunk((1, 2, 3, 4, 5), 0, (3,), need_logits=True), "block_table has 1 blocks"),
        (SequenceChunk((1,), 0, (-1,), need_logits=True), "block ids must lie"),
        (SequenceChunk((1,), 0, (NUM_BLOCKS,), need_logits=True), "block ids must lie"),
        (SequenceChunk((97,), 0, (0,), need_logits=True), "token ids must lie"),
        (SequenceChunk((), 0, (0,), need_logits=True), "at least one token"),
    ],
)
def test_chunks_outside_their_blocks_are_refused(chunk: SequenceChunk, message: str) -> None:
    config = tiny_config()
    model = paged_model(config, random_llama_tensors(config, seed=13))
    with pytest.raises(ValueError, match=message):
        model.forward([chunk])


def test_properties_and_cache_shape() -> None:
    config = tiny_config()
    model: Model = paged_model(config, random_llama_tensors(config, seed=14))  # mypy checks the protocol
    assert isinstance(model, NumpyLlama)
    assert (model.vocab_size, model.eos_token_id, model.config) == (97, 2, config)
    assert model.k_cache[0].shape == (NUM_BLOCKS, BLOCK_SIZE, 2, 8)
    assert len(model.v_cache) == config.num_hidden_layers


def test_batched_decode_attention_equals_one_sequence_at_a_time() -> None:
    rng = np.random.default_rng(3)
    heads, kv_heads, head_dim, block_size, num_blocks = 4, 2, 8, 4, 64
    k_cache = rng.standard_normal((num_blocks, block_size, kv_heads, head_dim)).astype(np.float32)
    v_cache = rng.standard_normal((num_blocks, block_size, kv_heads, head_dim)).astype(np.float32)
    starts = [1, 7, 20, 5, 13]  # each sequence decodes the token at this position
    free = list(rng.permutation(num_blocks))
    tables = [tuple(int(free.pop()) for _ in range(-(-(s + 1) // block_size))) for s in starts]
    q = rng.standard_normal((len(starts), heads, head_dim)).astype(np.float32)
    k = rng.standard_normal((len(starts), kv_heads, head_dim)).astype(np.float32)
    v = rng.standard_normal((len(starts), kv_heads, head_dim)).astype(np.float32)

    kb, vb = k_cache.copy(), v_cache.copy()
    batched = batched_decode_attention(q, k, v, kb, vb, tables, starts)
    one_by_one = np.stack([
        paged_attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], k_cache, v_cache, tables[i], starts[i])[0]
        for i in range(len(starts))
    ])  # fmt: skip
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kb, k_cache)  # both wrote the new K/V to the same slots
    np.testing.assert_array_equal(vb, v_cache)


def test_decode_groups_bound_padding() -> None:
    # Sorted longest first; a group grows while padded work <= 1.25x real work.
    assert decode_groups([300, 310, 30_000, 290, 305]) == [[2], [1, 4, 0, 3]]
    assert decode_groups([100]) == [[0]]
    assert decode_groups([]) == []
    assert decode_groups([1000, 10, 10]) == [[0], [1, 2]]
