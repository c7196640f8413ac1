"""PostgreSQL storage against a real server, with faults injected on the wire (``pg_proxy.py``) and by the
server itself: a commit whose answer was lost, a commit that never arrived, connections killed by the
server (as a failover does), a server that is down, a read-only server, a full disk, a bad configuration.
Every time: no acknowledged write lost, none stored twice, and every error names the key and the reason."""

from __future__ import annotations

import functools
import os
import tempfile
from urllib.parse import urlsplit

import anyio
import pytest

from orchestra import Agent
from orchestra.errors import (
    SessionConflictError,
    StorageConfigurationError,
    StorageConflictError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.session import SnapshotSessionManager
from orchestra.storage import ABSENT, PostgresStorage
from orchestra.testing import ScriptedModel
from tests.postgres import server_url
from tests.storage.pg_proxy import PostgresProxy
from tests.storage.test_group_commit import wait_until


@pytest.fixture
def proxy(postgres_uri):
    parts = urlsplit(server_url())
    with PostgresProxy(parts.hostname, parts.port) as running:
        yield running


@pytest.fixture
def faulty(proxy, postgres_uri):
    """A storage whose connections go through the proxy (short timeouts: failures come quickly)."""
    storage = PostgresStorage(proxy.url(postgres_uri), timeout=1, attempts=2)
    yield storage
    storage.close()


async def stored(uri: str, key: str):
    direct = PostgresStorage(uri)
    try:
        return await direct.read(key)
    finally:
        direct.close()


async def test_a_commit_whose_answer_was_lost_is_read_back_and_reported_done(faulty, proxy, postgres_uri):
    await faulty.write("warm", b"x")
    proxy.lose_commit_answer()
    version = await faulty.write("session/s1/journal/1.json", b"turn one", expect=ABSENT)
    assert proxy.faults == 1
    assert await stored(postgres_uri, "session/s1/journal/1.json") == (b"turn one", version)
    # The writer did not take its own write for somebody else's: its next conditional write holds.
    await faulty.write("session/s1/journal/1.json", b"turn one, again", expect=version)


async def test_a_commit_that_never_arrived_is_tried_again_and_stored_once(faulty, proxy, postgres_uri):
    await faulty.write("warm", b"x")
    proxy.lose_commit()
    version = await faulty.write("k", b"v", expect=ABSENT)
    assert proxy.faults == 1
    assert await stored(postgres_uri, "k") == (b"v", version)


async def test_a_lost_answer_for_a_shared_batch_settles_every_writer(faulty, proxy, postgres_uri):
    """Twenty writers, some of them racing for the same key: whatever batches they share and whichever
    answers are lost, each key holds exactly one winner, and that winner was told so."""
    await faulty.write("warm", b"x")
    proxy.lose_commit_answer(2)
    proxy.lose_commit(1)
    won: dict[str, list[tuple[str, str]]] = {}
    lost: list[str] = []

    async def create(key: str, who: str) -> None:
        try:
            version = await faulty.write(key, who.encode(), expect=ABSENT)
            won.setdefault(key, []).append((who, version))
        except StorageConflictError:
            lost.append(who)

    async with anyio.create_task_group() as tasks:
        for i in range(20):
            tasks.start_soon(create, f"race/{i % 8}", f"writer-{i}")
    assert proxy.faults == 3
    assert sorted(won) == [f"race/{k}" for k in range(8)]
    for key, winners in won.items():
        assert len(winners) == 1, winners
        assert await stored(postgres_uri, key) == (winners[0][0].encode(), winners[0][1])
    assert len(lost) == 12


async def test_answer_lost_and_the_server_unreachable_is_an_unknown_outcome_naming_the_key(
    faulty, proxy, postgres_uri
):
    await faulty.write("warm", b"x")
    proxy.lose_commit_answer()
    original = faulty.commit

    def commit_then_go_down(batch):
        try:
            original(batch)
        finally:
            proxy.refuse()  # the read-back finds the server gone

    faulty.commit = commit_then_go_down
    with pytest.raises(StorageOutcomeUnknownError) as info:
        await faulty.write("session/s1/journal/2.json", b"turn", expect=ABSENT)
    assert info.value.stored is None
    assert info.value.key == "session/s1/journal/2.json"
    assert "may or may not have been stored" in str(info.value)
    assert (await stored(postgres_uri, "session/s1/journal/2.json"))[0] == b"turn"  # it was, in fact


async def test_a_server_that_is_down_is_unavailable_and_nothing_is_stored(faulty, proxy, postgres_uri):
    await faulty.write("warm", b"x")
    proxy.refuse()
    with pytest.raises(StorageUnavailableError) as info:
        await faulty.write("k", b"v")
    assert info.value.stored is False
    assert info.value.key == "k"
    assert "try again later" in str(info.value)
    with pytest.raises(StorageUnavailableError, match="read of 'k'"):
        await faulty.read("k")
    proxy.accept()  # back: the same storage works again, on new connections, once the pool reconnects
    await anyio.to_thread.run_sync(wait_until, lambda: anyio.from_thread.run(readable, faulty), "reconnected")
    assert await faulty.read("k") is None
    await faulty.write("k", b"v")
    assert (await stored(postgres_uri, "k"))[0] == b"v"


async def readable(storage) -> bool:
    try:
        await storage.read("k")
    except StorageUnavailableError:
        return False
    return True


async def test_connections_killed_by_the_server_mid_batch_lose_and_double_nothing(
    postgres_storage, postgres_uri
):
    """What a failover or a restart does to clients: the server ends their connections (57P01). Here the
    batch waits for a lock when its connection is terminated, so its outcome is in doubt: it is read back,
    found not made, and committed again."""
    import psycopg

    await postgres_storage.write("warm", b"x")
    schema = postgres_uri.rsplit("%3D", 1)[1]
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute("BEGIN")
        admin.execute(f"LOCK TABLE {schema}.orchestra_storage IN EXCLUSIVE MODE")
        async with anyio.create_task_group() as tasks:
            for i in range(5):
                tasks.start_soon(functools.partial(postgres_storage.write, f"k{i}", b"v", expect=ABSENT))
            with psycopg.connect(server_url(), autocommit=True) as killer:

                def waiting() -> int:
                    return killer.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s",
                        (admin.info.backend_pid,),
                    ).fetchone()[0]

                await anyio.to_thread.run_sync(wait_until, lambda: waiting() >= 1, "a batch waiting")
                killer.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND pid <> %s",
                    (admin.info.backend_pid,),
                )
            admin.execute("COMMIT")
    assert await postgres_storage.list("k") == [f"k{i}" for i in range(5)]


async def test_a_read_only_server_refuses_writes_as_unavailable(postgres_uri):
    """After a failover, a connection may reach the old primary, now a standby: its transactions are
    read-only (SQLSTATE 25006). The write is refused as a passing outage, never half made."""
    await PostgresStorage(postgres_uri).write("k", b"v")  # the table exists
    read_only = PostgresStorage(f"{postgres_uri}%20-cdefault_transaction_read_only%3Don", attempts=2)
    try:
        assert (await read_only.read("k"))[0] == b"v"
        with pytest.raises(StorageUnavailableError, match="read-only transaction.*25006") as info:
            await read_only.write("k", b"w")
        assert info.value.stored is False
        assert info.value.key == "k"
    finally:
        read_only.close()
    assert (await stored(postgres_uri, "k"))[0] == b"v"


@pytest.mark.parametrize(
    ("change", "match"), [("/nosuchdb?", 'database "nosuchdb" does not exist'), ("nobody@", 'role "nobody"')]
)
async def test_a_misconfigured_server_is_a_configuration_error(change, match):
    url = server_url()
    bad = url.replace("/postgres?", change) if change.startswith("/") else url.replace("orchestra@", change)
    storage = PostgresStorage(bad)
    with pytest.raises(StorageConfigurationError, match=match) as info:
        await storage.write("k", b"v")
    assert info.value.key == "k"
    storage.close()


async def test_the_password_is_never_in_a_message():
    storage = PostgresStorage("postgresql://app:s3cret@127.0.0.1:1/db?connect_timeout=1", attempts=1)
    with pytest.raises(StorageUnavailableError) as info:
        await storage.read("k")
    assert "s3cret" not in str(info.value)
    assert "app:***@" in str(info.value)
    assert "s3cret" not in repr(storage)


async def fill(storage) -> None:
    for i in range(100):
        await storage.write(f"big/{i}", os.urandom(200_000))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs for a full disk needs root")
async def test_a_full_disk_is_storage_full_and_nothing_is_stored(postgres_uri, tmp_path):
    """A tablespace on a 1 MB tmpfs: PostgreSQL cannot extend the table (SQLSTATE 53100)."""
    import psycopg

    # Not under tmp_path: the server's own user must be able to reach the folder.
    mount = tempfile.mkdtemp(prefix="orchestra-full-disk-")
    os.chmod(mount, 0o755)
    mounted = await anyio.run_process(
        ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mount)], check=False
    )
    if mounted.returncode != 0:
        pytest.skip("this machine does not let root mount a tmpfs")
    tablespace = f"small_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**6}"
    try:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            data_dir = admin.execute("SHOW data_directory").fetchone()[0]
            owner = os.stat(data_dir).st_uid
            os.chown(mount, owner, -1)
            admin.execute(f"CREATE TABLESPACE {tablespace} LOCATION '{mount}'")
        storage = PostgresStorage(f"{postgres_uri}%20-cdefault_tablespace%3D{tablespace}")
        try:
            await storage.write("small", b"fits")
            with pytest.raises(StorageFullError) as info:
                await fill(storage)
            assert info.value.stored is False
            assert info.value.key.startswith("big/")
            assert "53100" in str(info.value)
            assert await storage.read(info.value.key) is None
            assert await storage.read("small") is not None
            await storage.delete_prefix("big/")
        finally:
            storage.close()
            with psycopg.connect(server_url(), autocommit=True) as admin:
                schema = postgres_uri.rsplit("%3D", 1)[1]
                admin.execute(f"DROP TABLE IF EXISTS {schema}.orchestra_storage")
                admin.execute(f"DROP TABLESPACE IF EXISTS {tablespace}")
    finally:
        await anyio.run_process(["umount", str(mount)], check=False)
        os.rmdir(mount)


async def test_two_servers_on_one_table_refuse_the_second_writer_of_a_session(postgres_uri):
    """Two storages (two pools, as two processes have) on one table: one writer per session."""
    first, second = PostgresStorage(postgres_uri), PostgresStorage(postgres_uri)
    try:
        a = Agent(
            model=ScriptedModel(["one", "two"]), session_manager=SnapshotSessionManager("s", storage=first)
        )
        b = Agent(model=ScriptedModel(["three"]), session_manager=SnapshotSessionManager("s", storage=second))
        await a.invoke_async("from a")
        with pytest.raises(SessionConflictError):
            await b.invoke_async("from b")
    finally:
        first.close()
        second.close()
