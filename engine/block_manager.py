"""The paged KV block pool, with prefix caching.

KV memory is `num_blocks` fixed-size blocks of `block_size` token slots. A sequence's
`block_table` lists its blocks in position order; position p lives in block
`block_table[p // block_size]` at offset `p % block_size`.

Prefix caching: once a block is full of computed KV, it is registered under a chain hash

    hash_0 = hash((None,   tokens[0:B],  namespace))
    hash_i = hash((hash_{i-1}, tokens[iB:(i+1)B], namespace))

so a hit on block i implies the whole prefix up to it matches (the stored key is compared too,
so a hash collision can never serve wrong KV). The namespace keeps tenants apart.

Free blocks wait in a queue ordered for eviction. A freed block keeps its KV and its hash until
it is handed out again (lazy eviction), so a request arriving later can still hit it:

    free queue:  front [unhashed ... | least recently freed cached ... most recent] back
                 ^ reuse from here                                    freed cached blocks go here

The scheduler asks (`match_prefix`, `can_allocate`, `can_append`) and then tells
(`allocate`, `append_slots`, `free`, `register_full_blocks`); this class never decides policy.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.sequence import Sequence

# (parent hash, the block's token ids, cache namespace): what a block's hash is computed from.
BlockKey = tuple[int | None, tuple[int, ...], str]


@dataclass(slots=True)
class KVBlock:
    """One physical block. `key`/`block_hash` are set while it is registered in the cache."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    key: BlockKey | None = None


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Cached blocks that cover the start of a sequence (possibly none)."""

    block_ids: tuple[int, ...]
    num_tokens: int
    # Hits that sit in the free queue: taking them shrinks what is left for new blocks.
    num_free_hits: int


NO_MATCH = PrefixMatch(block_ids=(), num_tokens=0, num_free_hits=0)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockManager:
    """Hands out KV blocks, reference-counted, never more than `num_blocks` at once.

    Holds no KV tensors itself (the model owns those), so a simulator can reuse it as is.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._blocks = [KVBlock(block_id=i) for i in range(num_blocks)]
        # OrderedDict gives O(1) removal from the middle, needed when a cache hit revives a
        # free block, which a deque or heap cannot do cheaply.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[int, int] = {}  # block hash -> block id
        self.num_reused_blocks = 0  # cumulative prefix-cache block hits

    @classmethod
    def from_config(cls, config: EngineConfig) -> BlockManager:
        return cls(config.num_blocks, config.block_size, config.enable_prefix_caching)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def block(self, block_id: int) -> KVBlock:
        return self._blocks[block_id]

    def free_queue(self) -> list[int]:
        """Free block ids in eviction order (front first). For tests and debugging."""
        return list(self._free)

    # -- asking -----------------------------------------------------------------------------

    def match_prefix(self, seq: Sequence) -> PrefixMatch:
        """The longest run of cached full blocks at the start of `seq`.

        Only blocks strictly before the one holding the last known token may match: that token
        is always recomputed to produce logits, and its block is written, so never shared.
        A sequence that wants its prompt's log-probabilities reads the prompt in full: a cached
        block holds KV, not the logits those need.
        """
        if not self.enable_prefix_caching or seq.wants_prompt_logits:
            return NO_MATCH
        bs = self.block_size
        max_blocks = (seq.num_tokens - 1) // bs
        self._extend_hashes(seq, max_blocks)
        namespace = seq.request.cache_namespace
        hits: list[int] = []
        num_free_hits = 0
        parent: int | None = None
        for i in range(max_blocks):
            block_hash = seq.block_hashes[i]
            block_id = self._cached.get(block_hash)
            if block_id is None:
                break
            block = self._blocks[block_id]
            if block.key != (parent, tuple(seq.all_token_ids[i * bs : (i + 1) * bs]), namespace):
                break
            hits.append(block_id)
            num_free_hits += block.ref_cnt == 0
            parent = block_hash
        if not hits:
            return NO_MATCH
        return PrefixMatch(tuple(hits), len(hits) * bs, num_free_hits)

    def can_allocate(self, match: PrefixMatch, num_tokens: int) -> bool:
        """Whether slots for positions [0, num_tokens) can be had, reusing `match`."""
        needed = cdiv(num_tokens, self.block_size) - len(match.block_ids)
        return needed <= len(self._free) - match.num_free_hits

    def num_new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks `seq` lacks to compute `num_new_tokens` more tokens."""
        return max(0, cdiv(seq.num_computed_tokens + num_new_tokens, self.block_size) - len(seq.block_table))

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.num_new_blocks(seq, num_new_tokens) <= len(self._free)

    # -- doing ------------------------------------------------------------------------------

    def allocate(self, seq: Sequence, match: PrefixMatch, num_tokens: int) -> None:
        """Give a sequence without blocks the cached `match` plus fresh blocks up to `num_tokens`.

        The cached tokens count as computed. Call only after `can_allocate` said yes.
        """
        assert not seq.block_table, "allocate() is for sequences that hold no blocks"
        for block_id in match.block_ids:
            block = self._blocks[block_id]
            if block.ref_cnt == 0:
                del self._free[block_id]
            block.ref_cnt += 1
        self.num_reused_blocks += len(match.block_ids)
        seq.block_table.extend(match.block_ids)
        seq.num_computed_tokens = match.num_tokens
        seq.num_registered_blocks = len(match.block_ids)
        self._take(seq, cdiv(num_tokens, self.block_size) - len(match.block_ids))

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Add the blocks `seq` needs to compute `num_new_tokens` more (after `can_append`)."""
        self._take(seq, self.num_new_blocks(seq, num_new_tokens))

    def free(self, seq: Sequence) -> None:
        """Release a sequence's blocks, tail first.

        Reverse order puts a sequence's last blocks ahead of its first in the eviction queue:
        a later request sharing the prefix needs the first blocks most. Blocks holding nothing
        reusable (never registered) go to the very front, so cached blocks outlive them.
        """
        for block_id in reversed(seq.block_table):
            block = self._blocks[block_id]
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._free[block_id] = None
                if block.block_hash is None:
                    self._free.move_to_end(block_id, last=False)
        seq.block_table.clear()
        seq.num_registered_blocks = 0

    def register_full_blocks(self, seq: Sequence) -> None:
        """Enter the blocks that computation has just filled into the prefix cache.

        Called after `num_computed_tokens` advanced. A block whose content is already cached
        in another block (two identical prompts read at once) stays unregistered.
        """
        if not self.enable_prefix_caching:
            return
        num_full = seq.num_computed_tokens // self.block_size
        if num_full <= seq.num_registered_blocks:
            return
        self._extend_hashes(seq, num_full)
        bs = self.block_size
        namespace = seq.request.cache_namespace
        for i in range(seq.num_registered_blocks, num_full):
            block_hash = seq.block_hashes[i]
            block = self._blocks[seq.block_table[i]]
            if block.block_hash is not None or block_hash in self._cached:
                continue
            parent = seq.block_hashes[i - 1] if i else None
            block.key = (parent, tuple(seq.all_token_ids[i * bs : (i + 1) * bs]), namespace)
            block.block_hash = block_hash
            self._cached[block_hash] = block.block_id
        seq.num_registered_blocks = num_full

    # -- internals --------------------------------------------------------------------------

    def _take(self, seq: Sequence, count: int) -> None:
        for _ in range(count):
            block_id, _unused = self._free.popitem(last=False)
            block = self._blocks[block_id]
            if block.block_hash is not None:  # lazy eviction happens here, on reuse
                if self._cached.get(block.block_hash) == block_id:
                    del self._cached[block.block_hash]
                block.block_hash = None
                block.key = None
            block.ref_cnt = 1
            seq.block_table.append(block_id)

    def _extend_hashes(self, seq: Sequence, num_blocks: int) -> None:
        """Compute chain hashes of `seq`'s first `num_blocks` blocks, once each."""
        hashes = seq.block_hashes
        bs = self.block_size
        namespace = seq.request.cache_namespace
        tokens = seq.all_token_ids
        for i in range(len(hashes), num_blocks):
            parent = hashes[i - 1] if i else None
            hashes.append(hash((parent, tuple(tokens[i * bs : (i + 1) * bs]), namespace)))
