"""LocalBlobStore: atomic writers and puts, exact ranges, chunked reads, key checks, prefix deletes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bulk.blob_store import WRITE_BUFFER_BYTES, BlobNotFound, LocalBlobStore


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_put_then_read_range_is_exact(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("batches/b1/input.jsonl", b"0123456789")
    assert await store.read_range("batches/b1/input.jsonl", 2, 5) == b"234"
    assert await store.read_range("batches/b1/input.jsonl", 0, 10) == b"0123456789"
    assert await store.read_range("batches/b1/input.jsonl", 7, 7) == b""
    assert await store.read_range("batches/b1/input.jsonl", 8, 50) == b"89"  # past the end: what there is
    assert await store.size("batches/b1/input.jsonl") == 10
    with pytest.raises(ValueError, match="invalid byte range"):
        await store.read_range("batches/b1/input.jsonl", 5, 4)


async def test_writer_object_is_invisible_until_commit(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    big = bytes(range(256)) * (WRITE_BUFFER_BYTES // 256 + 10)  # more than one buffer's worth
    writer = store.open_writer("b/input.jsonl")
    await writer.write(b"head:")
    await writer.write(big)
    await writer.write(b":tail")
    assert await store.size("b/input.jsonl") is None
    assert await writer.commit() == len(big) + 10
    assert await store.read_range("b/input.jsonl", 0, len(big) + 10) == b"head:" + big + b":tail"
    assert _files(tmp_path) == ["b/input.jsonl"]  # no temp file left behind


async def test_commit_replaces_an_existing_object_whole(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("k", b"old contents")
    writer = store.open_writer("k")
    await writer.write(b"new")
    assert await store.read_range("k", 0, 100) == b"old contents"
    await writer.commit()
    assert await store.read_range("k", 0, 100) == b"new"


async def test_abort_discards_and_keeps_the_previous_object(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("a/k", b"kept")
    writer = store.open_writer("a/k")
    await writer.write(b"x" * (WRITE_BUFFER_BYTES + 1))  # flushed to a temp file
    await writer.abort()
    assert await store.read_range("a/k", 0, 10) == b"kept"
    assert _files(tmp_path) == ["a/k"]
    with pytest.raises(RuntimeError, match="already committed or aborted"):
        await writer.write(b"more")


async def test_an_empty_upload_commits_an_empty_object(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    writer = store.open_writer("empty")
    assert await writer.commit() == 0
    assert await store.size("empty") == 0
    await writer.abort()  # after commit: nothing to discard, the object stays
    assert await store.size("empty") == 0
    with pytest.raises(RuntimeError):
        await writer.commit()


async def test_read_yields_bounded_pieces(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = bytes(range(256)) * 4
    await store.put("x/y", data)
    pieces = [piece async for piece in store.read("x/y", chunk_bytes=300)]
    assert [len(p) for p in pieces] == [300, 300, 300, 124]
    assert b"".join(pieces) == data


async def test_missing_objects(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("dir/obj", b"1")
    assert await store.size("nothing") is None
    assert await store.size("dir") is None  # a folder is not an object
    assert await store.size("dir/obj/deeper") is None
    with pytest.raises(BlobNotFound):
        await store.read_range("nothing", 0, 1)
    with pytest.raises(BlobNotFound):
        [piece async for piece in store.read("dir")]


@pytest.mark.parametrize("key", ["", "../escape", "a/../../b", "/abs", "a//b", "a/", ".hidden", "a/./b", "a\\b"])
async def test_keys_must_be_plain_relative_paths(tmp_path: Path, key: str) -> None:
    store = LocalBlobStore(tmp_path / "root")
    with pytest.raises(ValueError, match="invalid blob key"):
        await store.put(key, b"x")
    with pytest.raises(ValueError, match="invalid blob key"):
        store.open_writer(key)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "b").exists()


async def test_delete_prefix_removes_only_what_is_under_it(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    for key in ("batches/b1/input.jsonl", "batches/b1/errors.jsonl", "batches/b1/out/0", "batches/b10/input.jsonl"):
        await store.put(key, b"data")
    assert await store.delete_prefix("batches/b1") == 3
    assert await store.size("batches/b1/input.jsonl") is None
    assert await store.size("batches/b10/input.jsonl") == 4
    assert await store.delete_prefix("batches/b1") == 0
    assert await store.delete_prefix("never/was") == 0


async def test_delete_prefix_does_not_count_uploads_in_progress(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("p/done", b"1")
    writer = store.open_writer("p/pending")
    await writer.write(b"x" * (WRITE_BUFFER_BYTES + 1))
    assert await store.delete_prefix("p") == 1
    assert _files(tmp_path) == []


async def test_delete_removes_one_object_and_the_folders_it_empties_below_the_top(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("batches/b1/input.jsonl", b"a")
    await store.put("batches/b1/segments/s1.jsonl", b"b")
    await store.put("files/file-a", b"c")
    assert await store.delete("batches/b1/segments/s1.jsonl")
    assert not await store.delete("batches/b1/segments/s1.jsonl")  # twice is harmless
    assert await store.delete("batches/b1/input.jsonl")
    assert await store.delete("files/file-a")
    assert _files(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batches", "files"]  # top-level folders stay
    assert list((tmp_path / "batches").iterdir()) == []
    with pytest.raises(BlobNotFound):
        await store.read_range("files/file-a", 0, 1)
