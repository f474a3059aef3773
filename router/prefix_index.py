"""Which servers recently served which prompt prefixes, kept in bounded memory.

An entry maps one block hash (see `router.block_hashes`) to the few servers that most recently
served a prompt containing that block. The index is a guess at what the servers' prefix caches
hold, not a mirror of them: a server may have evicted a block the index still lists, and the
router pays only a missed cache hit for it.

    record(A: h0 h1 h2 h3), then record(B: g0 g1 g2): each touched last block first

      front [ h3 h2 h1 h0 | g2 g1 g0 ] back
        ^ evicted first: the deepest block of the least recent prompt

`record` touches a prompt's hashes from the last to the first, so when entries must go, the
deepest blocks of the least recent prompts go first and every surviving entry still sits behind
its own leading blocks (a leading block evicted first would orphan its whole chain).

Not thread-safe. No method awaits, so within one asyncio event loop each call is atomic.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixIndex:
    """Approximate, bounded map from prompt-prefix block hashes to the servers that recently served them.

    Memory is about 200 bytes an entry (about 40 MB at the default 200,000 entries, which cover
    3.2 million prompt tokens of 16-token blocks).
    """

    def __init__(self, max_entries: int = 200_000, max_servers_per_entry: int = 4) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be positive, got {max_entries}")
        if max_servers_per_entry < 1:
            raise ValueError(f"max_servers_per_entry must be positive, got {max_servers_per_entry}")
        self.max_entries = max_entries
        self.max_servers_per_entry = max_servers_per_entry
        # block hash -> servers holding it, least recent first. OrderedDict: O(1) move-to-end
        # and pop-front, which a plain dict cannot do cheaply after many deletions at its front.
        self._entries: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, block_hashes: Sequence[int], server_id: str) -> None:
        """Note that `server_id` now (probably) holds these blocks: it was sent this prompt.

        Each entry keeps the `max_servers_per_entry` most recent servers. Entries beyond
        `max_entries` are evicted, least recently recorded first.
        """
        entries = self._entries
        cap = self.max_servers_per_entry
        for block_hash in reversed(block_hashes):
            servers = entries.get(block_hash)
            if servers is None:
                entries[block_hash] = (server_id,)
                continue
            if servers[-1] != server_id:
                entries[block_hash] = (*(s for s in servers if s != server_id), server_id)[-cap:]
            entries.move_to_end(block_hash)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def matches(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """server_id -> how many leading blocks of `block_hashes` it holds; servers holding none are absent.

        A server's count is the length of the unbroken run from block 0 it is listed for (the
        prefix cache can only reuse such a run). The walk stops as soon as no server's run goes
        on, so it costs O(matched blocks). Reading does not refresh recency; `record` does.
        """
        run_lengths: dict[str, int] = {}
        holders: set[str] = set()  # servers whose run reaches `depth`
        seen: tuple[str, ...] = ()  # the last entry's servers: runs of equal entries cost no set work
        depth = 0
        for block_hash in block_hashes:
            servers = self._entries.get(block_hash)
            if servers is None:
                break
            if servers != seen:
                still = holders.intersection(servers) if depth else set(servers)
                for server_id in holders - still:
                    run_lengths[server_id] = depth
                holders, seen = still, servers
                if not holders:
                    break
            depth += 1
        for server_id in holders:
            run_lengths[server_id] = depth
        return run_lengths

    def forget_server(self, server_id: str) -> None:
        """Drop `server_id` from every entry (it died or was drained); entries left empty go.

        O(entries): meant for the rare change of membership, not per request.
        """
        entries = self._entries
        for block_hash, servers in list(entries.items()):
            if server_id not in servers:
                continue
            rest = tuple(s for s in servers if s != server_id)
            if rest:
                entries[block_hash] = rest
            else:
                del entries[block_hash]
