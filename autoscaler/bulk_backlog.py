"""The bulk backlog per pool, as the autoscaler needs it: tokens left and their deadline.

Batches live in Redis (`bulk.batch_store`): `sy:batches:active` lists the ones being worked
on, each record has its deadline and counts. The tokens an entry will cost are not stored (the
queue holds references to the uploaded file, not payloads, and reading every file each interval
would cost more than it tells), so a batch's work left is estimated:

    tokens_left = pending entries × tokens_per_entry

`tokens_per_entry` defaults to the brief's average request (2,000 prompt + 300 reply tokens);
set it to your batches' average (`switchyard usage` shows prompt and completion tokens of the
bulk class). A model served by several pools splits its batches' work evenly between them (the
dispatcher releases entries to whichever pool has room).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.signals import BulkDemand
from bulk.batch_store import BatchStatus, BatchStore

DEFAULT_TOKENS_PER_ENTRY = 2_300
_WORKING = (BatchStatus.IN_PROGRESS, BatchStatus.VALIDATING)


class BulkBacklog:
    """Reads every active batch and turns it into `BulkDemand` per pool."""

    def __init__(
        self,
        store: BatchStore,
        pools_by_model: Mapping[str, Sequence[str]],
        tokens_per_entry: int = DEFAULT_TOKENS_PER_ENTRY,
    ) -> None:
        if tokens_per_entry <= 0:
            raise ValueError(f"tokens_per_entry must be positive, got {tokens_per_entry}")
        self._store = store
        self._pools_by_model = pools_by_model
        self._tokens_per_entry = tokens_per_entry

    async def read(self) -> dict[str, tuple[BulkDemand, ...]]:
        """Pool -> its batches' remaining work, earliest deadline first (pools without any
        are absent)."""
        demands: dict[str, list[BulkDemand]] = {}
        for batch_id in await self._store.active_ids():  # earliest deadline first
            record = await self._store.get(batch_id)
            if record is None or record.status not in _WORKING or record.pending == 0:
                continue
            pools = self._pools_by_model.get(record.model_id, ())
            for pool_id in pools:
                tokens = record.pending * self._tokens_per_entry // len(pools)
                demands.setdefault(pool_id, []).append(BulkDemand(tokens, record.deadline))
        return {pool_id: tuple(items) for pool_id, items in demands.items()}
