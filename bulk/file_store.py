"""Files (OpenAI's Files API): a team's uploads and its batches' output and error files.

    sy:file:{id}          hash   the record; the bytes are in the blob store under `blob_key`
    sy:files:{team}       zset   the team's file ids by creation time
    sy:file-users:{id}    zset   batches that read the file, by their deadline: a file a
                                 running batch reads keeps its bytes until the batch ends

Creating a file also counts its bytes in the team's storage (`bulk.storage_quota`) and
schedules its expiry (`bulk.retention_schedule`), in one script. Another team's file is as
good as absent (404), as with batches.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bulk.batch_store import STORED_ID
from bulk.retention_schedule import EXPIRY_KEY, file_item
from bulk.storage_quota import storage_key

PURPOSES = ("batch", "batch_output")

# KEYS[1] record  KEYS[2] team's files  KEYS[3] team's storage  KEYS[4] expiry schedule
# ARGV[1] file id  ARGV[2] created_at  ARGV[3] bytes  ARGV[4] bytes already reserved
# ARGV[5] expires_at ('' for never)  ARGV[6] expiry member  ARGV[7..] field, value pairs.
# Written again (a finalizer that ran twice), the storage counts the file once.
_CREATE = """
local before = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('INCRBY', KEYS[3], tonumber(ARGV[3]) - tonumber(ARGV[4]) - before)
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[4], ARGV[5], ARGV[6]) end
return 1
"""

# KEYS[1] record  KEYS[2] team's files  KEYS[3] team's storage  ARGV[1] file id
# Returns 1 if this call removed the record (its bytes leave the team's storage once).
_DELETE = """
local size = redis.call('HGET', KEYS[1], 'bytes')
if not size then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DECRBY', KEYS[3], tonumber(size))
return 1
"""


@dataclass(frozen=True, slots=True)
class FileRecord:
    file_id: str
    team_id: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    blob_key: str
    expires_at: float | None = None  # None: kept until deleted


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


def uploaded_file_key(file_id: str) -> str:
    return f"files/{file_id}"


def file_key(file_id: str) -> str:
    return f"sy:file:{file_id}"


def _users_key(file_id: str) -> str:
    return f"sy:file-users:{file_id}"


class FileStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._create = client.register_script(_CREATE)
        self._delete = client.register_script(_DELETE)

    async def create(
        self,
        team_id: str,
        purpose: str,
        filename: str,
        size: int,
        blob_key: str,
        *,
        file_id: str | None = None,
        now: float | None = None,
        expires_at: float | None = None,
        reserved: int = 0,
    ) -> FileRecord:
        """Record a stored file, count it in the team's storage and schedule its expiry.
        `reserved`: bytes the upload already holds in the team's storage (its reservation)."""
        record = FileRecord(
            file_id or new_file_id(),
            team_id,
            purpose,
            filename,
            size,
            time.time() if now is None else now,
            blob_key,
            expires_at,
        )
        fields: dict[str, str | int | float] = {
            "team_id": team_id,
            "purpose": purpose,
            "filename": filename,
            "bytes": size,
            "created_at": record.created_at,
            "blob_key": blob_key,
        }
        if expires_at is not None:
            fields["expires_at"] = expires_at
        pairs = [value for item in fields.items() for value in item]
        await self._create(
            keys=[file_key(record.file_id), f"sy:files:{team_id}", storage_key(team_id), EXPIRY_KEY],
            args=[
                record.file_id,
                record.created_at,
                size,
                reserved,
                "" if expires_at is None else expires_at,
                file_item(record.file_id, blob_key).member,
                *pairs,
            ],
        )
        return record

    async def get(self, file_id: str) -> FileRecord | None:
        """The file whoever owns it (retention); routes use `get_for_team`."""
        if not STORED_ID.fullmatch(file_id):  # a caller's string that names no file, or another key
            return None
        raw: dict[Any, Any] = await self._redis.hgetall(file_key(file_id))
        if not raw:
            return None
        values = {_text(k): _text(v) for k, v in raw.items()}
        return FileRecord(
            file_id,
            values["team_id"],
            values["purpose"],
            values["filename"],
            int(values["bytes"]),
            float(values["created_at"]),
            values["blob_key"],
            float(values["expires_at"]) if "expires_at" in values else None,
        )

    async def get_for_team(self, team_id: str, file_id: str) -> FileRecord | None:
        record = await self.get(file_id)
        return record if record is not None and record.team_id == team_id else None

    async def list_for_team(self, team_id: str, limit: int = 100) -> list[FileRecord]:
        ids: list[Any] = await self._redis.zrevrange(f"sy:files:{team_id}", 0, limit - 1)
        records = [await self.get_for_team(team_id, _text(file_id)) for file_id in ids]
        return [record for record in records if record is not None]

    async def delete(self, record: FileRecord) -> bool:
        """Remove the record and take its bytes off the team's storage; False when it was
        already gone (another delete, or expiry, came first). The blob is `bulk.retention`'s."""
        keys = [file_key(record.file_id), f"sy:files:{record.team_id}", storage_key(record.team_id)]
        return bool(await self._delete(keys=keys, args=[record.file_id]))

    async def add_user(self, file_id: str, batch_id: str, until: float) -> None:
        """Batch `batch_id` reads the file until it ends (at the latest near `until`, its deadline)."""
        await self._redis.zadd(_users_key(file_id), {batch_id: until})

    async def remove_user(self, file_id: str, batch_id: str) -> None:
        await self._redis.zrem(_users_key(file_id), batch_id)

    async def users(self, file_id: str) -> list[tuple[str, float]]:
        """(batch id, its deadline) of every batch that has read the file."""
        raw: list[Any] = await self._redis.zrange(_users_key(file_id), 0, -1, withscores=True)
        return [(_text(batch_id), float(until)) for batch_id, until in raw]

    async def drop_users(self, file_id: str) -> None:
        await self._redis.delete(_users_key(file_id))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
