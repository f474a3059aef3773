"""Where batch files live: a small object-store interface and its local-folder implementation.

The interface is what an S3-compatible store offers, so a deployment can swap the folder for a
bucket without touching ingestion or the dispatcher:

    BlobWriter.write   ~ UploadPart        (bytes stream in; nothing is visible yet)
    BlobWriter.commit  ~ CompleteMultipartUpload (the whole object appears under its key at once)
    BlobWriter.abort   ~ AbortMultipartUpload
    read_range         ~ GetObject with `Range: bytes=start-(end-1)`
    delete             ~ DeleteObject
    delete_prefix      ~ ListObjectsV2(prefix) + DeleteObjects

Readers therefore never see half an upload: a key is absent until committed, then complete.

`LocalBlobStore` keeps each object as a file under a root folder. A writer fills a hidden temp
file next to its target and `os.replace`s it on commit (atomic within one file system). File
I/O runs in worker threads, in pieces of at least `WRITE_BUFFER_BYTES`, so a gateway that
stores a 200 MB upload keeps serving its streams.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO, Protocol

# Bytes a writer gathers before one thread hop to the disk: few hops, bounded memory.
WRITE_BUFFER_BYTES = 1 << 20


class BlobNotFound(LookupError):
    """The key names no committed object."""


class BlobWriter(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def commit(self) -> int:
        """Make the object visible under its key, atomically; returns its size in bytes."""
        ...

    async def abort(self) -> None:
        """Discard what was written; the key is left as it was."""
        ...


class BlobStore(Protocol):
    def open_writer(self, key: str) -> BlobWriter: ...

    async def put(self, key: str, data: bytes) -> None:
        """Store a whole (small) object, atomically."""
        ...

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (fewer when it ends sooner); raises BlobNotFound."""
        ...

    def read(self, key: str, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
        """The whole object in pieces of at most `chunk_bytes`; raises BlobNotFound."""
        ...

    async def size(self, key: str) -> int | None:
        """The object's size in bytes; None when there is none."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove one object; False when there was none (deleting twice is harmless)."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Remove every object whose key starts with `prefix/`; returns how many."""
        ...


class LocalBlobStore:
    """A `BlobStore` over a folder: key `batches/b1/input.jsonl` is `root/batches/b1/input.jsonl`.

    Keys are '/'-separated relative paths; a part may not be empty or start with '.', which
    rules out `..` escapes and leaves dot-names free for in-progress temp files.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def open_writer(self, key: str) -> LocalBlobWriter:
        return LocalBlobWriter(self._path(key))

    async def put(self, key: str, data: bytes) -> None:
        writer = self.open_writer(key)
        try:
            await writer.write(data)
            await writer.commit()
        except BaseException:
            await writer.abort()
            raise

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        if not 0 <= start <= end:
            raise ValueError(f"invalid byte range [{start}, {end})")
        path = self._path(key)
        return await asyncio.to_thread(_read_range, path, key, start, end)

    async def read(self, key: str, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, not {chunk_bytes}")
        file = await asyncio.to_thread(_open_for_read, self._path(key), key)
        try:
            while data := await asyncio.to_thread(file.read, chunk_bytes):
                yield data
        finally:
            await asyncio.to_thread(file.close)

    async def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            status = await asyncio.to_thread(path.stat)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return status.st_size if stat.S_ISREG(status.st_mode) else None

    async def delete(self, key: str) -> bool:
        return await asyncio.to_thread(_delete_file, self._path(key), self.root)

    async def delete_prefix(self, prefix: str) -> int:
        path = self._path(prefix)
        count = await asyncio.to_thread(_delete_tree, path)
        await asyncio.to_thread(_remove_empty_parents, path, self.root)
        return count

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or "\\" in key or "\0" in key:
            raise ValueError(f"invalid blob key {key!r}: use a relative path with '/' between parts")
        if any(not part or part.startswith(".") for part in parts):
            raise ValueError(f"invalid blob key {key!r}: parts may not be empty or start with '.'")
        return self.root.joinpath(*parts)


class LocalBlobWriter:
    """One upload in progress: a hidden temp file beside the target, renamed over it on commit.

    `abort` after `commit` does nothing (the object stays); `write` or `commit` after either
    raises, since the upload is over.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        self._buffer = bytearray()
        self._file: BinaryIO | None = None
        self._size = 0
        self._done = False

    async def write(self, data: bytes) -> None:
        self._check_open()
        self._buffer += data
        if len(self._buffer) >= WRITE_BUFFER_BYTES:
            await self._flush()

    async def commit(self) -> int:
        self._check_open()
        await self._flush()
        self._done = True
        file = self._file
        self._file = None
        await asyncio.to_thread(self._finish, file)
        return self._size

    async def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._buffer.clear()
        file = self._file
        self._file = None
        await asyncio.to_thread(self._discard, file)

    async def _flush(self) -> None:
        data = bytes(self._buffer)
        self._buffer.clear()
        if self._file is None:
            self._file = await asyncio.to_thread(self._create)
        if data:
            await asyncio.to_thread(self._file.write, data)
            self._size += len(data)

    def _create(self) -> BinaryIO:
        self._temp.parent.mkdir(parents=True, exist_ok=True)
        return self._temp.open("xb")

    def _finish(self, file: BinaryIO | None) -> None:
        assert file is not None, "commit flushes, which opens the temp file"
        try:
            with file:
                file.flush()
                os.fsync(file.fileno())  # after a crash, the name must not point at missing data
            os.replace(self._temp, self._path)
        except BaseException:
            self._temp.unlink(missing_ok=True)
            raise

    def _discard(self, file: BinaryIO | None) -> None:
        if file is not None:
            file.close()
        self._temp.unlink(missing_ok=True)

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError(f"the upload to {self._path} is already committed or aborted")


def _open_for_read(path: Path, key: str) -> BinaryIO:
    try:
        return path.open("rb")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise BlobNotFound(key) from None


def _read_range(path: Path, key: str, start: int, end: int) -> bytes:
    with _open_for_read(path, key) as file:
        file.seek(start)
        return file.read(end - start)


def _delete_file(path: Path, root: Path) -> bool:
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False
    _remove_empty_parents(path, root)
    return True


def _remove_empty_parents(path: Path, root: Path) -> None:
    """Remove the folders `path` leaves empty (`batches/{id}/segments`, `batches/{id}`), never a
    top-level one (`files/`, `batches/`): an upload may be creating its temp file there."""
    folder = path.parent
    while folder.parent != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or already gone)
            return
        folder = folder.parent


def _delete_tree(folder: Path) -> int:
    """Remove `folder` and everything in it; the count leaves out temp files (not objects)."""
    if not folder.is_dir():
        return 0
    count = sum(1 for path in folder.rglob("*") if path.is_file() and not path.name.startswith("."))
    shutil.rmtree(folder)
    return count
