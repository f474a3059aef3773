"""`NumpyLlama`: the CPU engine's model, a Llama forward pass over a paged KV cache it owns.

One `forward` call computes one engine step. The step's chunks are concatenated so that the
token-wise work (norms, projections, MLP) runs as a few large matmuls over every token at once;
only attention is per sequence, because each sequence reads its own blocks:

    tokens:  [ chunk A (prefill slice, 512) | chunk B (decode, 1) | chunk C (decode, 1) ]
    x:       [ T = 514, hidden ]  --rmsnorm--> @ qkv_proj --> q [T, H, d], k/v [T, KV, d]
    per chunk: write k/v into its block slots, gather K/V of positions [0, end), attend
    then:    @ o_proj, residual, rmsnorm, @ gate_up_proj, SwiGLU, @ down_proj, residual

The numerics follow HF transformers' `LlamaForCausalLM` (RMSNorm in float32, rotate_half
RoPE with float32 angles, query head h reading KV head h // (H / KV)), so a published
checkpoint yields the logits transformers would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.config import ModelConfig
from engine.forward_batch import SequenceChunk, logit_rows
from engine.weights import F32, LayerWeights, LlamaWeights, load_llama_weights


class NumpyLlama:
    """A Llama model in numpy that implements `engine.forward_batch.Model`.

    The KV cache is `num_blocks` blocks of `block_size` positions per layer, each of shape
    [num_blocks, block_size, num_kv_heads, head_dim] for K and for V. Which blocks a sequence
    uses is the block manager's business; the model only writes and reads the slots that a
    chunk's `block_table` names.
    """

    def __init__(self, weights: LlamaWeights, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be at least 1")
        cfg = weights.config
        self._weights = weights
        self._block_size = block_size
        cache_shape = (num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
        self.k_cache: list[F32] = [np.zeros(cache_shape, np.float32) for _ in weights.layers]
        self.v_cache: list[F32] = [np.zeros(cache_shape, np.float32) for _ in weights.layers]
        self._rope = RotaryTable(cfg.head_dim, cfg.rope_theta)

    @classmethod
    def from_pretrained(cls, model_dir: Path, num_blocks: int, block_size: int) -> NumpyLlama:
        """Load an HF Llama checkpoint folder (config.json + safetensors)."""
        return cls(load_llama_weights(model_dir), num_blocks, block_size)

    @property
    def config(self) -> ModelConfig:
        return self._weights.config

    @property
    def vocab_size(self) -> int:
        return self._weights.config.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self._weights.config.eos_token_id

    @property
    def num_blocks(self) -> int:
        return self.k_cache[0].shape[0] if self.k_cache else 0

    @property
    def block_size(self) -> int:
        return self._block_size

    def forward(self, chunks: list[SequenceChunk]) -> F32:
        """Compute every chunk and return its logit rows (`forward_batch.logit_rows`) in chunk order."""
        if not chunks:
            return np.zeros((0, self.vocab_size), np.float32)
        for chunk in chunks:
            self._check_chunk(chunk)
        token_ids = np.fromiter(
            (t for c in chunks for t in c.token_ids),
            dtype=np.int64,
            count=sum(len(c.token_ids) for c in chunks),
        )
        positions = np.concatenate([np.arange(c.start_position, c.start_position + len(c.token_ids)) for c in chunks])
        cos, sin = self._rope.cos_sin(positions)
        x = self._weights.embed_tokens[token_ids]
        for layer_index, layer in enumerate(self._weights.layers):
            x = self._decoder_layer(layer_index, layer, x, chunks, cos, sin)

        ends = np.cumsum([len(c.token_ids) for c in chunks])
        last_rows: list[int] = []
        for end, chunk in zip(ends, chunks, strict=True):
            last_rows.extend(range(int(end) - logit_rows(chunk), int(end)))
        if not last_rows:
            return np.zeros((0, self.vocab_size), np.float32)
        hidden = _rms_norm(x[last_rows], self._weights.norm, self.config.rms_norm_eps)
        logits: F32 = hidden @ self._weights.lm_head
        return logits

    def _decoder_layer(
        self, layer_index: int, w: LayerWeights, x: F32, chunks: list[SequenceChunk], cos: F32, sin: F32
    ) -> F32:
        cfg = self.config
        heads, kv_heads, head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        num_tokens = x.shape[0]

        qkv = _rms_norm(x, w.input_layernorm, cfg.rms_norm_eps) @ w.qkv_proj
        q = qkv[:, : heads * head_dim].reshape(num_tokens, heads, head_dim)
        k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].reshape(num_tokens, kv_heads, head_dim)
        v = qkv[:, (heads + kv_heads) * head_dim :].reshape(num_tokens, kv_heads, head_dim)
        q = RotaryTable.apply(q, cos, sin)
        k = RotaryTable.apply(k, cos, sin)

        attn = np.empty((num_tokens, heads * head_dim), np.float32)
        k_cache, v_cache = self.k_cache[layer_index], self.v_cache[layer_index]
        offsets = np.cumsum([0] + [len(c.token_ids) for c in chunks])
        decodes: list[int] = []  # chunk indices of single-token decodes: batched below
        for i, chunk in enumerate(chunks):
            if len(chunk.token_ids) == 1 and chunk.start_position > 0:
                decodes.append(i)
                continue
            rows = slice(int(offsets[i]), int(offsets[i + 1]))
            attn[rows] = paged_attention(
                q[rows], k[rows], v[rows], k_cache, v_cache, chunk.block_table, chunk.start_position
            )
        for group in decode_groups([chunks[i].start_position + 1 for i in decodes]):
            members = [decodes[g] for g in group]
            rows_idx = offsets[members]
            attn[rows_idx] = batched_decode_attention(
                q[rows_idx], k[rows_idx], v[rows_idx], k_cache, v_cache,
                [chunks[i].block_table for i in members], [chunks[i].start_position for i in members],
            )  # fmt: skip
        x = x + attn @ w.o_proj

        gate_up = _rms_norm(x, w.post_attention_layernorm, cfg.rms_norm_eps) @ w.gate_up_proj
        gate, up = gate_up[:, : cfg.intermediate_size], gate_up[:, cfg.intermediate_size :]
        out: F32 = x + (_silu(gate) * up) @ w.down_proj
        return out

    def _check_chunk(self, chunk: SequenceChunk) -> None:
        """Refuse chunks that would read or write outside their blocks: numpy would wrap a
        negative block id or position silently and corrupt another sequence's KV."""
        n = len(chunk.token_ids)
        if n == 0 or chunk.start_position < 0:
            raise ValueError("a chunk needs at least one token and a non-negative start_position")
        end = chunk.start_position + n
        needed_blocks = -(-end // self._block_size)
        if len(chunk.block_table) < needed_blocks:
            raise ValueError(
                f"block_table has {len(chunk.block_table)} blocks; positions [0, {end}) need {needed_blocks}"
            )
        used = chunk.block_table[:needed_blocks]
        if min(used) < 0 or max(used) >= self.num_blocks:
            raise ValueError(f"block ids must lie in [0, {self.num_blocks}), got {used}")
        if min(chunk.token_ids) < 0 or max(chunk.token_ids) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")


def _rms_norm(x: F32, weight: F32, eps: float) -> F32:
    """HF LlamaRMSNorm: x / sqrt(mean(x^2) + eps), then the learned scale."""
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    out: F32 = x * (1.0 / np.sqrt(variance + np.float32(eps))) * weight
    return out


def _silu(x: F32) -> F32:
    """x * sigmoid(x), with sigmoid written through tanh so large |x| cannot overflow exp."""
    out: F32 = x * (np.float32(0.5) + np.float32(0.5) * np.tanh(np.float32(0.5) * x))
    return out


# Scores per attention tile (16 MB of float32): small enough to stay in cache, large enough
# that per-tile numpy overhead is noise.
DEFAULT_TILE_SCORES = 4 * 1024 * 1024


class RotaryTable:
    """RoPE cos/sin per position, computed lazily and grown by doubling as positions deepen.

    Angles are float32 products of float32 positions and inverse frequencies, as in HF
    transformers: at position 30,000 a float64 angle differs by ~1e-3 rad, which would make our
    logits drift from transformers' on long prompts.
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
        self._inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)
        self._cos: F32 = np.empty((0, head_dim // 2), np.float32)
        self._sin: F32 = np.empty((0, head_dim // 2), np.float32)

    def cos_sin(self, positions: npt.NDArray[np.int64]) -> tuple[F32, F32]:
        """cos and sin of shape [len(positions), 1, head_dim / 2], broadcastable over heads."""
        needed = int(positions.max()) + 1
        if needed > len(self._cos):
            size = max(needed, 2 * len(self._cos), 256)
            angles = np.outer(np.arange(size, dtype=np.float32), self._inv_freq).astype(np.float32)
            self._cos, self._sin = np.cos(angles), np.sin(angles)
        return self._cos[positions][:, None, :], self._sin[positions][:, None, :]

    @staticmethod
    def apply(x: F32, cos: F32, sin: F32) -> F32:
        """HF's `x * cos + rotate_half(x) * sin` with rotate_half(x) = [-x2, x1], on halves."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        out: F32 = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        return out


def paged_attention(
    q: F32,
    k: F32,
    v: F32,
    k_cache: F32,
    v_cache: F32,
    block_table: tuple[int, ...],
    start: int,
    *,
    max_tile_scores: int = DEFAULT_TILE_SCORES,
) -> F32:
    """Causal attention of one chunk, after writing its K/V into the paged cache.

    q [n, H, d] and k [n, KV, d] already rotated, v [n, KV, d]; returns [n, H * d].

    Query heads are grouped by the KV head they read (head h reads h // (H / KV)), so scores
    are batched matmuls [KV, group * r, d] @ [KV, d, end] over contiguous keys. Queries go in
    tiles of r rows so each tile's scores stay in cache and one buffer serves every tile: a
    512-token chunk at depth 29,000 ran twice as fast as with one [KV, group * n, end] array.
    Only the diagonal block needs a causal mask (every query reads all positions before the
    chunk), and a tile reads keys only up to its own last query. `max_tile_scores` bounds a
    tile's score count (at least one query row per tile).
    """
    n, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    block_size = k_cache.shape[1]
    end = start + n
    table = np.asarray(block_table[: -(-end // block_size)], dtype=np.intp)
    positions = np.arange(start, end)
    slots = (table[positions // block_size], positions % block_size)
    k_cache[slots] = k
    v_cache[slots] = v
    if start == 0:  # nothing cached before this chunk: attend to the chunk's own K/V
        keys, values = k, v
    else:
        keys = k_cache[table].reshape(-1, kv_heads, head_dim)[:end]
        values = v_cache[table].reshape(-1, kv_heads, head_dim)[:end]
    keys_by_head = np.ascontiguousarray(keys.transpose(1, 0, 2))  # [KV, end, d]
    # The softmax denominator rides along in the value matmul as a column of ones, which saves
    # a pass over the scores.
    values_and_ones = np.empty((kv_heads, end, head_dim + 1), np.float32)
    values_and_ones[..., :head_dim] = values.transpose(1, 0, 2)
    values_and_ones[..., head_dim] = 1.0

    # Scores are in log2 units (exp2 is ~35% faster than exp in numpy): fold log2(e) into the
    # usual 1/sqrt(d) scale of the queries.
    scale = np.float32(np.log2(np.e) / np.sqrt(head_dim))
    grouped_q = (q * scale).reshape(n, kv_heads, group, head_dim).transpose(1, 2, 0, 3)  # [KV, G, n, d]
    max_key_norms = np.sqrt(np.einsum("hjd,hjd->hj", keys_by_head, keys_by_head).max(axis=1))  # [KV]
    causal = np.triu(np.full((n, n), -np.inf, np.float32), k=1)
    rows = max(1, min(n, max_tile_scores // (kv_heads * group * end)))
    scratch = np.empty(kv_heads * group * rows * end, np.float32)
    weighted = np.empty((kv_heads, group, n, head_dim + 1), np.float32)
    for first in range(0, n, rows):
        last = min(first + rows, n)
        tile_end = start + last  # keys after the tile's last query are all masked: skip them
        tile_q = grouped_q[:, :, first:last].reshape(kv_heads, group * (last - first), head_dim)
        scores = scratch[: kv_heads * group * (last - first) * tile_end].reshape(kv_heads, -1, tile_end)
        np.matmul(tile_q, keys_by_head[:, :tile_end].transpose(0, 2, 1), out=scores)
        scores.reshape(kv_heads, group, last - first, tile_end)[..., start:] += causal[first:last, :last]
        _exp2_shifted(scores, tile_q, max_key_norms)
        weighted[:, :, first:last] = np.matmul(scores, values_and_ones[:, :tile_end]).reshape(
            kv_heads, group, last - first, head_dim + 1
        )
    out = weighted[..., :head_dim] / weighted[..., head_dim:]
    result: F32 = out.transpose(2, 0, 1, 3).reshape(n, heads * head_dim)
    return result


def decode_groups(lengths: list[int], max_padding: float = 1.25) -> list[list[int]]:
    """Split decodes (by context length) into groups that attend together, padded to the
    group's longest context; a group's padded work stays within `max_padding` x its real work,
    so one 30,000-token context does not make fifteen 300-token ones pay for its length."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    total = 0
    for i in order:
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= max_padding * (total + lengths[i]):
            groups[-1].append(i)
            total += lengths[i]
        else:
            groups.append([i])
            total = lengths[i]
    return groups


def batched_decode_attention(
    q: F32,
    k: F32,
    v: F32,
    k_cache: F32,
    v_cache: F32,
    block_tables: list[tuple[int, ...]],
    starts: list[int],
) -> F32:
    """Attention of one new token for each of n sequences at once, after caching its K/V.

    q [n, H, d], k and v [n, KV, d]; returns [n, H * d]. Every sequence's keys are gathered
    into one [n, L, KV, d] array padded to the longest context L, and padded positions are
    masked: a few numpy calls for the whole batch instead of a Python loop per sequence,
    which made a decode step of 9 short streams several times slower than one of a single
    stream (step cost grew with batch size the way it does not on a GPU).
    """
    n, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    block_size = k_cache.shape[1]
    positions = np.asarray(starts, dtype=np.intp)
    lengths = positions + 1
    new_blocks = np.fromiter((t[p // block_size] for t, p in zip(block_tables, starts, strict=True)), np.intp, n)
    k_cache[new_blocks, positions % block_size] = k
    v_cache[new_blocks, positions % block_size] = v

    max_blocks = -(-int(lengths.max()) // block_size)
    table = np.zeros((n, max_blocks), np.intp)  # padding reads block 0; those positions are masked
    for row, (t, length) in enumerate(zip(block_tables, lengths, strict=True)):
        used = -(-int(length) // block_size)
        table[row, :used] = t[:used]
    padded = max_blocks * block_size
    keys = k_cache[table].reshape(n, padded, kv_heads, head_dim).transpose(0, 2, 3, 1)  # [n, KV, d, L]
    values = v_cache[table].reshape(n, padded, kv_heads, head_dim).transpose(0, 2, 1, 3)  # [n, KV, L, d]

    grouped_q = (q * np.float32(1.0 / np.sqrt(head_dim))).reshape(n, kv_heads, group, head_dim)
    scores = np.matmul(grouped_q, keys)  # [n, KV, G, L]
    padding = np.arange(padded)[None, :] >= lengths[:, None]  # [n, L]
    scores[np.broadcast_to(padding[:, None, None, :], scores.shape)] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    out: F32 = np.matmul(scores, values).reshape(n, heads * head_dim)  # [n, KV, G, d] -> [n, H*d]
    return out


# Without a max shift, exp2 of scores within +-64 neither overflows (even summed over 2^16
# keys and weighted by values) nor underflows to an all-zero row.
_EXP2_SAFE = 64.0


def _exp2_shifted(scores: F32, queries: F32, max_key_norms: F32) -> None:
    """Replace scores by exp2(scores - shift) in place, with a shift that cannot overflow.

    Softmax is shift-invariant, so the usual row max is only there for safety. |q.k| is at most
    |q| * max|k|; when that bound is small (always, for our small random models) the max pass
    over the scores is skipped, which is ~15% of attention time. Published models with large
    activations take the row-max path.
    """
    query_norms = np.sqrt(np.einsum("hrd,hrd->hr", queries, queries))
    if float((query_norms.max(axis=1) * max_key_norms).max()) >= _EXP2_SAFE:
        scores -= scores.max(axis=-1, keepdims=True)
    np.exp2(scores, out=scores)
