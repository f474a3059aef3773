"""When stored things expire: one Redis sorted set, scored by the time each one goes.

    sy:expiry   zset   "file|{file_id}|{blob_key}"  ->  expires_at   an uploaded or output file
                       "batch|{batch_id}"           ->  expires_at   an ended batch's record

Whatever stores a thing schedules it in the same transaction (`FileStore.create`); the
finalizer schedules a batch as it ends. `bulk.retention` reads only what is due
(ZRANGEBYSCORE -inf now LIMIT n): its cost follows what expires, never what is stored.
A file's member carries its blob key, so its bytes can be found after its record is gone (a
file deleted while a running batch still reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EXPIRY_KEY = "sy:expiry"
_SEPARATOR = "|"


@dataclass(frozen=True, slots=True)
class ExpiryItem:
    """A file (with its blob) or a batch, as the schedule names it."""

    kind: Literal["file", "batch"]
    item_id: str
    blob_key: str = ""  # a file's

    @property
    def member(self) -> str:
        if self.kind == "file":
            return _SEPARATOR.join((self.kind, self.item_id, self.blob_key))
        return _SEPARATOR.join((self.kind, self.item_id))

    @classmethod
    def parse(cls, member: bytes | str) -> ExpiryItem | None:
        """The item a member names; None for one this version does not know (left alone)."""
        text = member.decode() if isinstance(member, bytes) else member
        kind, _, rest = text.partition(_SEPARATOR)
        if kind == "file":
            file_id, _, blob_key = rest.partition(_SEPARATOR)
            return cls("file", file_id, blob_key) if file_id and blob_key else None
        if kind == "batch" and rest:
            return cls("batch", rest)
        return None


def file_item(file_id: str, blob_key: str) -> ExpiryItem:
    return ExpiryItem("file", file_id, blob_key)


def batch_item(batch_id: str) -> ExpiryItem:
    return ExpiryItem("batch", batch_id)
