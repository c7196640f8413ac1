"""LocalFileStorage: no symlink followed, private permissions, atomic writes, locks across processes."""

import multiprocessing
import os
import stat
from typing import Any

import anyio
import pytest

from orchestra.errors import StorageConflictError, StorageSecurityError
from orchestra.storage import ABSENT, LocalFileStorage, storage_from_uri
from orchestra.storage._uri import parse_storage_uri


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


@pytest.mark.parametrize("links", [True, False], ids=["unnamed-file-linked", "temp-file-renamed"])
async def test_create_only_refuses_a_symlink_or_folder_and_leaves_nothing_behind(tmp_path, links):
    """Both ways of creating (an unnamed file linked by name where Linux offers O_TMPFILE, else a temp
    file renamed under the lock) refuse what is in the way the same way, and leave no file of their own."""
    storage = LocalFileStorage(tmp_path / "root")
    storage._links = storage._links and links
    await storage.write("d/taken", b"first", expect=ABSENT)
    os.symlink(tmp_path / "outside", tmp_path / "root/d/link")
    os.mkdir(tmp_path / "root/d/folder")
    with pytest.raises(StorageConflictError, match="already exists"):
        await storage.write("d/taken", b"second", expect=ABSENT)
    for in_the_way in ("d/link", "d/folder"):
        with pytest.raises(StorageSecurityError):
            await storage.write(in_the_way, b"x", expect=ABSENT)
    assert (tmp_path / "root/d/taken").read_bytes() == b"first"
    assert not (tmp_path / "outside").exists()
    assert set(os.listdir(tmp_path / "root/d")) - {".lock"} == {"folder", "link", "taken"}


def _create_in_another_process(root: str, name: str, go: Any) -> None:
    async def main() -> list[str]:
        storage = LocalFileStorage(f"{root}/store")
        won = []
        for i in range(100):
            try:
                await storage.write(f"race/{i:03d}", name.encode(), expect=ABSENT)
            except StorageConflictError:
                continue
            won.append(f"race/{i:03d}")
        return won

    go.wait(60)  # a barrier: once every process is up, they all create at once
    won = anyio.run(main)
    with open(f"{root}/won-{name}", "w") as out:
        out.write("\n".join(won))


async def test_create_only_has_one_winner_per_key_across_processes(tmp_path):
    """Three processes create the same 100 keys: each key has exactly one creator, and holds its bytes."""
    context = multiprocessing.get_context("spawn")
    names = ["a", "b", "c"]
    go = context.Barrier(len(names))
    workers = [context.Process(target=_create_in_another_process, args=(str(tmp_path), n, go)) for n in names]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    won = {name: (tmp_path / f"won-{name}").read_text().split() for name in names}
    assert sorted(key for keys in won.values() for key in keys) == [f"race/{i:03d}" for i in range(100)]
    storage = LocalFileStorage(tmp_path / "store")
    for name, keys in won.items():
        for key in keys:
            assert (await storage.read(key))[0] == name.encode()
    assert [n for n in os.listdir(tmp_path / "store/race") if n.startswith(".tmp-")] == []


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
    # Windows paths are folders too: a drive letter is not a scheme, a backslash is a separator.
    assert parse_storage_uri("C:\\data\\sessions") == ("file", {"root": "C:\\data\\sessions"})
    assert parse_storage_uri(".\\data") == ("file", {"root": ".\\data"})
    with pytest.raises(ValueError, match="did you mean memory"):
        parse_storage_uri("memroy")
