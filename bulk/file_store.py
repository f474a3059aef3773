"""Files (OpenAI's Files API): a team's uploads and its batches' output and error files.

    sy:file:{id}        hash   the record; the bytes are in the blob store under `blob_key`
    sy:files:{team}     zset   the team's file ids by creation time

Another team's file is as good as absent (404), as with batches.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

PURPOSES = ("batch", "batch_output")


@dataclass(frozen=True, slots=True)
class FileRecord:
    file_id: str
    team_id: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    blob_key: str


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


def uploaded_file_key(file_id: str) -> str:
    return f"files/{file_id}"


class FileStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client

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
    ) -> FileRecord:
        record = FileRecord(
            file_id or new_file_id(), team_id, purpose, filename, size, time.time() if now is None else now, blob_key
        )
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                f"sy:file:{record.file_id}",
                mapping={
                    "team_id": team_id,
                    "purpose": purpose,
                    "filename": filename,
                    "bytes": size,
                    "created_at": record.created_at,
                    "blob_key": blob_key,
                },
            )
            pipe.zadd(f"sy:files:{team_id}", {record.file_id: record.created_at})
            await pipe.execute()
        return record

    async def get_for_team(self, team_id: str, file_id: str) -> FileRecord | None:
        raw: dict[Any, Any] = await self._redis.hgetall(f"sy:file:{file_id}")
        if not raw:
            return None
        values = {_text(k): _text(v) for k, v in raw.items()}
        if values["team_id"] != team_id:
            return None
        return FileRecord(
            file_id,
            values["team_id"],
            values["purpose"],
            values["filename"],
            int(values["bytes"]),
            float(values["created_at"]),
            values["blob_key"],
        )

    async def list_for_team(self, team_id: str, limit: int = 100) -> list[FileRecord]:
        ids: list[Any] = await self._redis.zrevrange(f"sy:files:{team_id}", 0, limit - 1)
        records = [await self.get_for_team(team_id, _text(file_id)) for file_id in ids]
        return [record for record in records if record is not None]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
