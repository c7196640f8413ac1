"""LocalFileStorage: no symlink followed, private permissions, atomic writes, locks across processes."""

import multiprocessing
import os
import stat

import anyio
import pytest

from orchestra.errors import StorageConflictError, StorageSecurityError
from orchestra.storage import LocalFileStorage, storage_from_uri


async def test_files_are_0600_and_folders_0700(tmp_path):
    storage = LocalFileStorage(tmp_path / "root")
    await storage.write("a/b/c.json", b"{}")
    assert stat.S_IMODE(os.stat(tmp_path / "root").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "root/a").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "root/a/b").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "root/a/b/c.json").st_mode) == 0o600


async def test_a_symlinked_file_is_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me")
    storage = LocalFileStorage(tmp_path / "root")
    await storage.write("session/s/message_0.json", b"{}")
    os.symlink(secret, tmp_path / "root/session/s/message_1.json")
    with pytest.raises(StorageSecurityError, match="symlink"):
        await storage.read("session/s/message_1.json")
    with pytest.raises(StorageSecurityError, match="symlink"):
        await storage.write("session/s/message_1.json", b"overwrite")
    with pytest.raises(StorageSecurityError, match="symlink"):
        await storage.list("session/")
    assert secret.read_text() == "do not read me"


async def test_a_symlinked_folder_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.json").write_text("{}")
    storage = LocalFileStorage(tmp_path / "root")
    os.symlink(outside, tmp_path / "root/session")
    for operation in (
        storage.read("session/x.json"),
        storage.write("session/y.json", b"{}"),
        storage.list("session/"),
    ):
        with pytest.raises(StorageSecurityError):
            await operation
    assert sorted(p.name for p in outside.iterdir()) == ["x.json"]


async def test_the_root_itself_may_be_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    storage = LocalFileStorage(tmp_path / "link")
    await storage.write("k", b"v")
    assert (real / "k").read_bytes() == b"v"


async def test_temp_and_lock_files_never_show_as_keys(tmp_path):
    storage = LocalFileStorage(tmp_path)
    await storage.write("d/k", b"v")
    (tmp_path / "d" / ".tmp-k-leftover").write_bytes(b"partial")
    assert await storage.list("") == ["d/k"]
    assert await storage.delete_prefix("d/") == 1
    assert not (tmp_path / "d").exists()


async def test_a_failed_write_leaves_the_old_value(tmp_path):
    storage = LocalFileStorage(tmp_path)
    version = await storage.write("k", b"old")
    with pytest.raises(StorageConflictError):
        await storage.write("k", b"new", expect="not-the-version")
    assert await storage.read("k") == (b"old", version)
    assert sorted(os.listdir(tmp_path)) == [".lock", "k"]


def _bump_in_another_process(root: str, rounds: int) -> None:
    async def main() -> None:
        storage = LocalFileStorage(root)
        for _ in range(rounds):
            while True:
                data, version = await storage.read("counter")
                try:
                    await storage.write("counter", str(int(data) + 1).encode(), expect=version)
                    break
                except StorageConflictError:
                    continue

    anyio.run(main)


async def test_compare_and_swap_holds_across_processes(tmp_path):
    storage = LocalFileStorage(tmp_path)
    await storage.write("counter", b"0")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_bump_in_another_process, args=(str(tmp_path), 25)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert (await storage.read("counter"))[0] == b"75"


def test_storage_uris(tmp_path):
    assert isinstance(storage_from_uri(f"file:{tmp_path}/a"), LocalFileStorage)
    assert storage_from_uri(f"file://{tmp_path}/b").root == tmp_path / "b"
    assert storage_from_uri(str(tmp_path / "c")).root == tmp_path / "c"
    assert storage_from_uri("memory://shared") is storage_from_uri("memory://shared")
    assert storage_from_uri("memory") is not storage_from_uri("memory")
    with pytest.raises(ValueError, match="unknown storage URI"):
        storage_from_uri("ftp://host/x")
